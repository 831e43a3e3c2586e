//! A records store that goes away yields 503 with an ApiError, never a hang, and recovers.

use std::sync::Arc;
use std::time::Duration;

use control_plane::config::ServerConfig;

use crate::support::{
    Call, Proxy, Tenant, TestApp, assert_api_error, create_database, issuance_body, needs, routes,
    spawn_app, spawn_app_with, spawn_with_config, sql_exec, sql_value,
};

/// An app whose Postgres is reached through a proxy the test controls, a tenant, and the path
/// of the tenant's activity, read once to warm the connections.
async fn behind_proxy() -> (TestApp, Tenant, Arc<Proxy>, String) {
    behind_proxy_with(|_| ()).await
}

/// [`behind_proxy`] with `configure` applied to the server's configuration.
async fn behind_proxy_with(
    configure: impl FnOnce(&mut ServerConfig),
) -> (TestApp, Tenant, Arc<Proxy>, String) {
    let (name, _) = create_database().await;
    let postgres = crate::support::postgres_base();
    let hostport = postgres.rsplit('@').next().unwrap().to_owned();
    let proxy = Proxy::start(&hostport).await;
    let via_proxy = format!(
        "{}@127.0.0.1:{}/{name}",
        postgres.rsplit_once('@').unwrap().0,
        proxy.port
    );
    let mut config = crate::support::test_config(&via_proxy);
    configure(&mut config);
    let app = spawn_with_config(name, config).await;
    let tenant = app.bootstrap().await;
    let path = routes::activity(tenant.workspace_id);
    app.get(&path, &tenant.token).ok_response().await;
    (app, tenant, proxy, path)
}

/// Puts trigger `name` on the inserts into `tokens` that match `when` (an SQL condition on
/// `NEW`), running `body` (PL/pgSQL) before each.
async fn on_token_insert(app: &TestApp, name: &str, when: &str, body: &str) {
    let mut db = app.db().await;
    let function = format!(
        "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} END $$"
    );
    sql_exec!(&mut db, sqlx::AssertSqlSafe(function)).unwrap();
    let trigger = format!(
        "CREATE TRIGGER {name} BEFORE INSERT ON tokens FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION {name}()"
    );
    sql_exec!(&mut db, sqlx::AssertSqlSafe(trigger)).unwrap();
}

/// Issues a token every 250 ms until one is answered 200 or `within` has passed: the last
/// status, and how long it took.
async fn issue_until_served(app: &TestApp, tenant: &Tenant, within: Duration) -> (u16, Duration) {
    let started = std::time::Instant::now();
    loop {
        let answer = app.issue(&tenant.token, &issuance_body(tenant)).await;
        let status = answer.status().as_u16();
        if status == 200 || started.elapsed() >= within {
            return (status, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
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

/// Postgres only: a write whose statement is in flight when the network goes silent (its
/// connection's ping passed before) is a 503 at the handler's deadline, with no key as with
/// one, not a hang. A write queued behind it in its batch, whose caller was answered 503 too,
/// is dropped rather than written once packets flow again.
#[tokio::test]
async fn postgres_only_a_write_in_flight_when_the_network_goes_silent_is_503() {
    needs!(Postgres);
    // A lease of 6 s: writes are stopped at 4 s.
    let (app, tenant, proxy, _) = behind_proxy_with(|c| c.idempotency_lease_ms = 6_000).await;
    on_token_insert(
        &app,
        "test_slow",
        "true",
        "PERFORM pg_sleep(1); RETURN NEW;",
    )
    .await;
    let (in_flight, queued) = (issuance_body(&tenant), issuance_body(&tenant));
    let issue = |body: &'_ serde_json::Value, after: u64| {
        let (app, token, body) = (&app, &tenant.token, body.clone());
        async move {
            tokio::time::sleep(Duration::from_millis(after)).await;
            let started = std::time::Instant::now();
            // Bounded, so a write that is not stopped fails the test instead of hanging it.
            let response = tokio::time::timeout(Duration::from_secs(20), app.issue(token, &body));
            let status = response.await.map_or(0, |r| r.status().as_u16());
            (status, started.elapsed())
        }
    };
    // The first issuance's batch is inside its one-second INSERT when the proxy stalls; the
    // second (same owner, so the same batch lane) waits behind it.
    let (first, second, ()) = tokio::join!(issue(&in_flight, 0), issue(&queued, 200), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        proxy.stall();
    });
    for (status, took) in [first, second] {
        assert_eq!(status, 503, "stopped at the deadline");
        assert!(took < Duration::from_secs(8), "answered late: {took:?}");
    }

    proxy.unstall();
    let (status, _) = issue_until_served(&app, &tenant, Duration::from_secs(10)).await;
    assert_eq!(status, 200, "writes work again without a restart");
    // The lane took the queued write before this last one: its caller was gone, so it was
    // never written. (The one in flight may have committed: its outcome was unknown.)
    let name = queued["name"].as_str().unwrap().to_owned();
    let written = sql_value!(
        app,
        i64,
        "SELECT count(*) FROM tokens WHERE name = $1",
        name
    );
    assert_eq!(
        written, 0,
        "a write whose caller was answered 503 is not written later"
    );
}

/// Postgres only: a batch of writes whose connection goes silent for good (the path forgot
/// it, as a NAT or a firewall may, while new connections get through) is dropped at its
/// deadline (three statement timeouts, 15 s), so the writes after it in its lane are served on
/// new connections, with no restart. Before, the lane waited on that connection for ever.
#[tokio::test]
async fn postgres_only_a_batch_stuck_on_a_dead_connection_frees_its_lane() {
    needs!(Postgres);
    let (app, tenant, proxy, _) = behind_proxy_with(|c| c.idempotency_lease_ms = 6_000).await;
    let slow = "PERFORM pg_sleep(1); RETURN NEW;";
    on_token_insert(&app, "test_slow", "NEW.name LIKE 'stuck-%'", slow).await;
    let mut stuck = issuance_body(&tenant);
    stuck["name"] = serde_json::json!("stuck-1");
    let stuck = tokio::time::timeout(Duration::from_secs(20), app.issue(&tenant.token, &stuck));
    let (answer, ()) = tokio::join!(stuck, async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        proxy.strand_open_connections();
    });
    let answer = answer.expect("stopped at the deadline, not left waiting");
    assert_eq!(answer.status(), 503, "stopped at the deadline");

    // Same owner, so the same lane. Connections left idle before the strand fail their ping
    // or their read deadline one by one; after them the pool dials new ones.
    let (status, took) = issue_until_served(&app, &tenant, Duration::from_secs(60)).await;
    assert_eq!(
        status, 200,
        "the lane serves writes again without a restart"
    );
    eprintln!("writes served again {took:?} after the strand");
}

/// The smallest pool (3): two connections stay on LISTEN and the read pool keeps none between
/// statements, so a write after a read still finds the third (it would otherwise wait out the
/// acquire timeout and be a 503).
#[tokio::test]
async fn the_smallest_pool_serves_reads_and_writes() {
    let app = spawn_app_with(|config| config.db_max_connections = 3).await;
    let tenant = app.bootstrap().await;
    let path = routes::activity(tenant.workspace_id);
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
    let deadlock = "RAISE EXCEPTION 'a test deadlock' USING ERRCODE = 'deadlock_detected';";
    on_token_insert(&app, "test_deadlock", "true", deadlock).await;
    let before = sql_value!(app, i64, "SELECT count(*) FROM tokens");

    let refused = app.issue(&tenant.token, &issuance_body(&tenant)).await;
    assert!(
        refused.headers().contains_key("retry-after"),
        "a 503 says when to retry"
    );
    assert_api_error(refused, 503, "unavailable").await;
    assert_eq!(sql_value!(app, i64, "SELECT count(*) FROM tokens"), before);

    sql_exec!(&mut app.db().await, "DROP TRIGGER test_deadlock ON tokens").unwrap();
    let retried = app.issue(&tenant.token, &issuance_body(&tenant)).await;
    assert_eq!(retried.status(), 200, "the retry succeeds");
}

/// Postgres only: a replica that starts while the migrations are held (here a lock on their
/// table, as another replica's long migration holds it) waits for them past the 5 s statement
/// timeout and starts, instead of failing its start: migrations run without the request path's
/// timeouts.
#[tokio::test]
async fn postgres_only_a_replica_starting_during_a_long_migration_waits_for_it() {
    needs!(Postgres);
    let first = spawn_app().await;
    let mut holder = first.db().await;
    sql_exec!(&mut holder, "BEGIN").unwrap();
    sql_exec!(
        &mut holder,
        "LOCK TABLE _sqlx_migrations IN ACCESS EXCLUSIVE MODE"
    )
    .unwrap();
    let held = Duration::from_secs(7);
    let release = tokio::spawn(async move {
        tokio::time::sleep(held).await;
        sql_exec!(&mut holder, "COMMIT").unwrap();
    });

    let started = std::time::Instant::now();
    let second = spawn_with_config(first.database_name.clone(), first.config.clone()).await;
    let waited = started.elapsed();
    release.await.unwrap();
    assert!(
        waited >= held - Duration::from_secs(1),
        "the second start waited for the migrations ({waited:?})"
    );
    let ready = second
        .request(reqwest::Method::GET, "/readyz")
        .send()
        .await
        .expect("request");
    assert_eq!(ready.status(), 200, "the second replica serves");
}
