//! A records store that goes away yields 503 with an ApiError, never a hang, and recovers.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{
    Call, Proxy, Tenant, TestApp, assert_api_error, create_database, issuance_body, needs,
    spawn_app, spawn_app_with, spawn_with_config, sql_exec, sql_value,
};

/// An app whose Postgres is reached through a proxy the test controls, a tenant, and the path
/// of the tenant's activity, read once to warm the connections.
async fn behind_proxy() -> (TestApp, Tenant, Arc<Proxy>, String) {
    let (name, _) = create_database().await;
    let postgres = crate::support::postgres_base();
    let hostport = postgres.rsplit('@').next().unwrap().to_owned();
    let proxy = Proxy::start(&hostport).await;
    let via_proxy = format!(
        "{}@127.0.0.1:{}/{name}",
        postgres.rsplit_once('@').unwrap().0,
        proxy.port
    );
    let app = spawn_with_config(name, crate::support::test_config(&via_proxy)).await;
    let tenant = app.bootstrap().await;
    let path = format!("/v1/workspaces/{}/activity", tenant.workspace_id);
    app.get(&path, &tenant.token).ok_response().await;
    (app, tenant, proxy, path)
}

/// Asserts that `path` answers 503 `unavailable` within 15 s (a client timeout of 30 s turns a
/// hang into a failure instead of a stuck test).
async fn assert_prompt_503(app: &TestApp, path: &str, token: Option<&str>) {
    let request = match token {
        Some(token) => app.get(path, token),
        None => app.client.get(app.url(path)),
    };
    let started = std::time::Instant::now();
    request
        .timeout(Duration::from_secs(30))
        .expect(503, "unavailable")
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{path} answered late: {:?}",
        started.elapsed()
    );
}

/// Asserts that `path` is served again within 10 s, with no restart.
async fn assert_recovers(app: &TestApp, path: &str, token: &str) {
    let mut status = 0;
    for _ in 0..40 {
        status = app.get(path, token).status_code().await;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(status, 200, "recovered without a restart");
}

/// Postgres only: the outage is a proxy in front of the Postgres server, cut and restored.
#[tokio::test]
async fn postgres_only_down_is_503_and_recovery_needs_no_restart() {
    needs!(Postgres);
    let (app, tenant, proxy, path) = behind_proxy().await;
    proxy.cut();
    assert_prompt_503(&app, &path, Some(&tenant.token)).await;
    assert_prompt_503(&app, "/readyz", None).await;
    proxy.restore().await;
    assert_recovers(&app, &path, &tenant.token).await;
}

/// Postgres only: a network that silently drops packets (nothing is closed, nothing answers)
/// is a 503 within the statement deadline, not a hang; and it heals when packets flow again.
#[tokio::test]
async fn postgres_only_a_silent_partition_is_503_not_a_hang() {
    needs!(Postgres);
    let (app, tenant, proxy, path) = behind_proxy().await;
    // The read pool now holds a connection it will reuse without a ping.
    proxy.stall();
    assert_prompt_503(&app, &path, Some(&tenant.token)).await;
    assert_prompt_503(&app, "/readyz", None).await;
    proxy.unstall();
    assert_recovers(&app, &path, &tenant.token).await;
}

/// The smallest pool (3): two connections stay on LISTEN and the read pool keeps none between
/// statements, so a write after a read still finds the third (it would otherwise wait out the
/// acquire timeout and be a 503).
#[tokio::test]
async fn the_smallest_pool_serves_reads_and_writes() {
    let app = spawn_app_with(|config| config.db_max_connections = 3).await;
    let tenant = app.bootstrap().await;
    let path = format!("/v1/workspaces/{}/activity", tenant.workspace_id);
    for _ in 0..3 {
        app.get(&path, &tenant.token).ok_response().await;
        let write = app.issue(&tenant.token, &issuance_body(&tenant)).await;
        assert_eq!(write.status(), 200);
    }
}

/// Postgres only: a statement that Postgres fails for now, not for good (here a deadlock, which
/// it resolves by failing one side; a failover's read-only primary is the same case) is a 503
/// with `retry-after`, not a 500: the transaction rolled back, so a retry is safe and succeeds.
#[tokio::test]
async fn postgres_only_a_deadlock_is_503_and_nothing_is_written() {
    needs!(Postgres);
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let mut db = app.db().await;
    sql_exec!(
        &mut db,
        "CREATE FUNCTION test_deadlock() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'a test deadlock' USING ERRCODE = 'deadlock_detected'; END $$"
    )
    .unwrap();
    sql_exec!(
        &mut db,
        "CREATE TRIGGER test_deadlock BEFORE INSERT ON tokens
         FOR EACH ROW EXECUTE FUNCTION test_deadlock()"
    )
    .unwrap();
    let before = sql_value!(app, i64, "SELECT count(*) FROM tokens");

    let refused = app.issue(&tenant.token, &issuance_body(&tenant)).await;
    assert!(
        refused.headers().contains_key("retry-after"),
        "a 503 says when to retry"
    );
    assert_api_error(refused, 503, "unavailable").await;
    assert_eq!(sql_value!(app, i64, "SELECT count(*) FROM tokens"), before);

    sql_exec!(&mut db, "DROP TRIGGER test_deadlock ON tokens").unwrap();
    let retried = app.issue(&tenant.token, &issuance_body(&tenant)).await;
    assert_eq!(retried.status(), 200, "the retry succeeds");
}
