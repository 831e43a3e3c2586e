//! The outcome of a keyed mutation is committed with its change (`http/idempotency/`): a
//! retry whose fast-state record is gone (Redis restarted, a process crashed between commit and
//! completion, a lease ended) replays it instead of running again. On every backend.

use std::time::Duration;

use control_plane::storage::{OutcomeRecord, StoreError};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::*;

const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

/// Makes the fast state forget every idempotency record, as a Redis restart without
/// persistence does, or a restart of a process that kept them in memory.
async fn forget_fast_state(mut app: TestApp) -> TestApp {
    if let Some(url) = app.config.redis_url.clone() {
        delete_redis_keys(&url, &app.config.redis_prefix).await;
        return app;
    }
    if sqlite_mode() {
        sql_exec!(
            &mut app.db().await,
            "DELETE FROM embedded_idempotency_records"
        )
        .unwrap();
        return app;
    }
    let config = app.config.clone();
    let name = app.database_name.clone();
    app.stop().await;
    app.database_name = String::new(); // the new app removes the database
    drop(app);
    spawn_with_config(name, config).await
}

async fn count(app: &TestApp, sql: &'static str) -> i64 {
    sql_value!(app, i64, sql)
}

async fn submit_keyed(
    app: &TestApp,
    tenant: &Tenant,
    body: &Value,
    key: &str,
) -> reqwest::Response {
    app.post_json(
        &routes::runner_commands(tenant.workspace_id),
        &tenant.token,
        body,
    )
    .header("idempotency-key", key)
    .response()
    .await
}

#[tokio::test]
async fn a_retry_the_fast_state_forgot_replays_the_outcome_committed_with_the_change() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "outcomes").await;
    let body = json!({"poolId": pool, "command": "deploy", "args": ["v1"]});
    let key = format!("outcome-{}", Uuid::new_v4().simple());

    let first = submit_keyed(&app, &tenant, &body, &key).await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();
    assert_eq!(
        count(&app, "SELECT count(*) FROM idempotency_outcomes").await,
        1,
        "the outcome is committed with the command"
    );

    let app = forget_fast_state(app).await;
    let again = submit_keyed(&app, &tenant, &body, &key).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again, first, "the same response, byte for byte in JSON");
    assert_eq!(
        count(&app, "SELECT count(*) FROM runner_commands").await,
        1,
        "the command ran once"
    );

    // Copied back to the fast state: the next retry replays from there as well.
    let third = submit_keyed(&app, &tenant, &body, &key).await;
    assert_eq!(third.headers()["idempotency-replayed"], "true");

    // Another body under the key is a reuse, judged by the committed fingerprint.
    let app = forget_fast_state(app).await;
    let other = json!({"poolId": pool, "command": "rollback"});
    let reused = submit_keyed(&app, &tenant, &other, &key).await;
    assert_api_error(reused, 409, "idempotency_key_reused").await;
    assert_eq!(count(&app, "SELECT count(*) FROM runner_commands").await, 1);
}

/// A committed outcome answers only its own principal: after the fast state forgot the key, a
/// caller of another organisation sending the same key and body to the same path gets the
/// refusal any stranger gets, not the replay, and nothing runs.
#[tokio::test]
async fn a_foreign_caller_reusing_a_forgotten_key_gets_no_replay() {
    let (app, tenant) = tenant_app().await;
    let stranger = app.bootstrap().await;
    let pool = create_pool(&app, tenant.workspace_id, "outcomes").await;
    let body = json!({"poolId": pool, "command": "deploy", "args": ["v1"]});
    let key = format!("outcome-{}", Uuid::new_v4().simple());
    let first = submit_keyed(&app, &tenant, &body, &key).await;
    assert_eq!(first.status(), 200);

    let app = forget_fast_state(app).await;
    let foreign = app
        .post_json(
            &routes::runner_commands(tenant.workspace_id),
            &stranger.token,
            &body,
        )
        .header("idempotency-key", &key)
        .response()
        .await;
    assert!(
        foreign.headers().get("idempotency-replayed").is_none(),
        "no replay for another principal"
    );
    let status = foreign.status().as_u16();
    assert!(matches!(status, 403 | 404), "{status}");
    let text = foreign.text().await.unwrap();
    assert!(
        !text.contains(&pool.to_string()),
        "nothing of the outcome leaks: {text}"
    );
    assert_eq!(count(&app, "SELECT count(*) FROM runner_commands").await, 1);
}

#[tokio::test]
async fn a_second_outcome_under_a_live_key_is_refused_by_the_records_store() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "outcomes").await;
    let key = format!("outcome-{}", Uuid::new_v4().simple());
    let body = json!({"poolId": pool, "command": "deploy"});
    assert_eq!(submit_keyed(&app, &tenant, &body, &key).await.status(), 200);
    let place = sql_value!(app, String, "SELECT place FROM idempotency_outcomes");
    let now = chrono::Utc::now().timestamp_millis();
    let second = OutcomeRecord {
        place: place.clone(),
        fingerprint: "another".into(),
        sealed: vec![1, 2, 3],
        expires_at_ms: now + 60_000,
    };
    let refused = app.services.store().put_outcome(&second, now).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    // Once expired, the place takes a new outcome (a key is remembered for 24 h, not longer).
    let later = now + 25 * 3600 * 1000;
    let replaced = OutcomeRecord {
        expires_at_ms: later + 60_000,
        ..second
    };
    app.services
        .store()
        .put_outcome(&replaced, later)
        .await
        .expect("an expired outcome is replaced");
    assert_eq!(
        app.services
            .store()
            .purge_outcomes(later + 120_000, 100)
            .await
            .unwrap(),
        1,
        "purged once expired"
    );
    assert_eq!(
        count(&app, "SELECT count(*) FROM idempotency_outcomes").await,
        0
    );
}

/// A server process dies (a test-only fault hook aborts it) after committing a keyed command
/// and its outcome, before the fast state hears of it; the client retries on a fresh process.
#[tokio::test]
async fn a_crash_between_commit_and_completion_never_runs_the_change_twice() {
    let mut app = spawn_app_with(|c| {
        c.token_hash_key = Some(HASH_KEY.into());
        // Short, so the dead attempt's claim ends within the test.
        c.idempotency_lease_ms = 1500;
    })
    .await;
    let tenant = app.bootstrap().await;
    let pool = create_pool(&app, tenant.workspace_id, "crash").await;
    // The embedded store serves one process: the in-process app steps aside.
    app.stop().await;
    let body = json!({"poolId": pool, "command": "deploy"});
    let key = format!("crash-{}", Uuid::new_v4().simple());
    let path = routes::runner_commands(tenant.workspace_id);
    let lease = ("CP_IDEMPOTENCY_LEASE_MS", "1500");

    let doomed = ServerProcess::start_with_env(
        &app.config,
        HASH_KEY,
        RECORD_KEY,
        &[("CP_FAULT_ABORT_AFTER_OUTCOME_COMMIT", "1"), lease],
    );
    let lost = app
        .client
        .post(format!("{}{path}", doomed.address))
        .bearer_auth(&tenant.token)
        .header("idempotency-key", &key)
        .json(&body)
        .send()
        .await;
    assert!(lost.is_err(), "the process died before answering: {lost:?}");
    assert!(
        doomed.wait_for_exit(Duration::from_secs(10)).is_some(),
        "the fault hook ended the process"
    );
    assert_eq!(count(&app, "SELECT count(*) FROM runner_commands").await, 1);

    let fresh = ServerProcess::start_with_env(&app.config, HASH_KEY, RECORD_KEY, &[lease]);
    // A careful client: retry while the dead attempt's claim may still hold the key.
    let mut answered = None;
    for _ in 0..100 {
        let retry = app
            .client
            .post(format!("{}{path}", fresh.address))
            .bearer_auth(&tenant.token)
            .header("idempotency-key", &key)
            .json(&body)
            .response()
            .await;
        if retry.status() == 409 {
            let wait = retry.headers()["retry-after"].to_str().unwrap().to_owned();
            assert_eq!(wait, "1");
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        answered = Some(retry);
        break;
    }
    let answered = answered.expect("the retry was answered once the claim ended");
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.headers()["idempotency-replayed"], "true");
    let replayed: Value = answered.json().await.unwrap();
    assert_eq!(replayed["command"]["command"], "deploy");
    assert_eq!(
        count(&app, "SELECT count(*) FROM runner_commands").await,
        1,
        "the command ran once"
    );
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM audit_events WHERE event_type = 'runner_command.submitted'"
        )
        .await,
        1
    );
}

/// Postgres only: a first attempt whose COMMIT outlives its lease (a deferred trigger holds it
/// 4 s; the lease is 3 s) is answered 503, and a retry after the lease runs beside it. The
/// retry's change then fails on the first's once that lands (the token name it took). The
/// retry is answered with the first attempt's committed outcome, not 409 `conflict`, and the
/// token exists once. The partition drill found this when a healed network let a stalled
/// COMMIT land just after a retry's claim.
#[tokio::test]
async fn postgres_only_a_retry_that_fails_on_its_keys_late_commit_replays_that_commit() {
    needs!(Postgres);
    let app = spawn_app_with(|c| c.idempotency_lease_ms = 3_000).await;
    let tenant = app.bootstrap().await;
    let mut db = app.db().await;
    sql_exec!(
        &mut db,
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(4); RETURN NULL; END $$"
    )
    .unwrap();
    sql_exec!(
        &mut db,
        "CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON idempotency_outcomes DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()"
    )
    .unwrap();
    let body = issuance_body(&tenant);
    let key = Uuid::new_v4().to_string();
    let send = || {
        app.post_json(routes::ISSUE_TOKEN, &tenant.token, &body)
            .header("idempotency-key", &key)
            .response()
    };

    let started = std::time::Instant::now();
    let first = send().await;
    assert_api_error(first, 503, "unavailable").await;
    // Past the first attempt's lease, before its COMMIT lands (4 s after it began).
    tokio::time::sleep(Duration::from_millis(3_300).saturating_sub(started.elapsed())).await;
    let retry = send().await;
    assert_eq!(
        retry.status(),
        200,
        "the retry answers the first attempt's outcome"
    );
    let name = body["name"].as_str().unwrap().to_owned();
    let tokens = sql_value!(
        app,
        i64,
        "SELECT count(*) FROM tokens WHERE name = $1",
        name
    );
    assert_eq!(tokens, 1, "the token exists once");
}

/// The late-commit path asks the authorizer as every replay does. A first attempt issued a
/// child token on the second workspace; then its outcome is found only after a retry's handler
/// ran (the outcome row moved out and back while a test-only hook holds the retry between its
/// 4xx and that lookup: a commit landing after the retry's claim). The retry comes after the
/// parent lost the second workspace: it gets its own 403, never the child's secret.
#[tokio::test]
async fn postgres_only_a_retry_refused_while_its_keys_outcome_lands_late_gets_its_own_refusal() {
    // A second server process on the same records: the embedded store serves one process.
    needs!(Postgres);
    let mut app = spawn_app_with(|c| {
        c.token_hash_key = Some(HASH_KEY.into());
        // The process below must open what this one sealed.
        c.idempotency_keys = Some(RECORD_KEY.into());
    })
    .await;
    let tenant = app.bootstrap().await;
    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let parent = app
        .admin_token(
            &tenant,
            &[control_plane::domain::Scope::TokensIssue],
            &[tenant.workspace_id, second],
            &[],
        )
        .await;
    let body = json!({
        "name": format!("child-{}", Uuid::new_v4().simple()),
        "scopes": ["tokens:issue"],
        "organisationId": tenant.organisation_id,
        "workspaceIds": [second],
    });
    let key = format!("late-{}", Uuid::new_v4().simple());
    let issue = |client: reqwest::Client, address: String| {
        let (body, key, parent) = (body.clone(), key.clone(), parent.clone());
        async move {
            client
                .post(format!("{address}{}", routes::ISSUE_TOKEN))
                .bearer_auth(parent)
                .header("idempotency-key", key)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };

    let first = issue(app.client.clone(), app.address.clone()).await;
    assert_eq!(first.status(), 200);
    let secret = first.json::<Value>().await.unwrap()["credential"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    // The parent loses the second workspace: a fresh request for it is a 403.
    let parent_id = app.services.authenticate(&parent).await.unwrap().token_id;
    app.services
        .revoke_token_access_as_admin(
            Some(second),
            parent_id,
            control_plane::domain::RevocationReason::parse("rotated").unwrap(),
            false,
            &control_plane::domain::CorrelationId::generate(),
        )
        .await
        .unwrap();
    let (mut db, outcome) = take_outcome_out(&mut app).await;
    let server = late_outcome_server(&app);
    let retry = tokio::spawn(issue(app.client.clone(), server.address.clone()));
    hold_then_put_back(&mut db, &outcome).await;

    let retry = retry.await.unwrap();
    assert!(
        retry.headers().get("idempotency-replayed").is_none(),
        "no replay for a caller refused"
    );
    let refused = assert_api_error(retry, 403, "forbidden").await;
    assert!(!refused.to_string().contains(&secret), "{refused}");
    assert_eq!(refused["error"]["details"]["field"], "workspaceIds");
}

/// The only stored outcome, taken out of the stopped app's records store while the fast state
/// forgets its key (a process's memory goes with it): a retry's claim then finds nothing.
async fn take_outcome_out(app: &mut TestApp) -> (TestDb, (String, String, Vec<u8>, i64)) {
    app.stop().await;
    let mut db = app.db().await;
    let outcome = sql_one!(
        &mut db,
        (String, String, Vec<u8>, i64),
        "SELECT place, fingerprint, sealed, expires_at FROM idempotency_outcomes"
    )
    .unwrap();
    sql_exec!(&mut db, "DELETE FROM idempotency_outcomes").unwrap();
    if let Some(url) = app.config.redis_url.clone() {
        delete_redis_keys(&url, &app.config.redis_prefix).await;
    } else if sqlite_mode() {
        sql_exec!(&mut db, "DELETE FROM embedded_idempotency_records").unwrap();
    }
    (db, outcome)
}

/// A server on the app's records whose keyed requests that end in a 4xx wait 4 s before they
/// look for an outcome committed under their key meanwhile.
fn late_outcome_server(app: &TestApp) -> ServerProcess {
    let hook = [("CP_FAULT_PAUSE_BEFORE_LATE_OUTCOME_MS", "4000")];
    ServerProcess::start_with_env(&app.config, HASH_KEY, RECORD_KEY, &hook)
}

/// Puts the outcome back while a retry is held by the hook. Its claim's lookup and its handler
/// take milliseconds; the hook then holds it 4 s before the second lookup, and the outcome lands
/// in between. (Landing before the claim's lookup would make this an ordinary replay, refused
/// the same way: a slow machine can only make the test weaker, never fail it.) No other request
/// may probe the key meanwhile: one that came first would take the claim itself.
async fn hold_then_put_back(db: &mut TestDb, outcome: &(String, String, Vec<u8>, i64)) {
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (place, fingerprint, sealed, expires) = outcome;
    sql_exec!(
        db,
        "INSERT INTO idempotency_outcomes (place, fingerprint, sealed, expires_at) VALUES ($1, $2, $3, $4)",
        place,
        fingerprint,
        sealed,
        *expires
    )
    .unwrap();
}

/// A keyed pool deletion whose retry fails 404 (the first attempt deleted the pool) and then
/// finds the first attempt's outcome, landed late; the caller's token is revoked between the
/// retry's authentication and that lookup. The outcome is not its to get: a replay reads the
/// caller again rather than trusting it as it authenticated.
#[tokio::test]
async fn a_token_revoked_while_its_retry_runs_gets_no_late_outcome() {
    let mut app = spawn_app_with(|c| {
        c.token_hash_key = Some(HASH_KEY.into());
        c.idempotency_keys = Some(RECORD_KEY.into());
    })
    .await;
    let tenant = app.bootstrap().await;
    let pool = create_pool(&app, tenant.workspace_id, "doomed").await;
    let token = app
        .admin_token(
            &tenant,
            &[control_plane::domain::Scope::RunnerPoolsDelete],
            &[tenant.workspace_id],
            &[],
        )
        .await;
    let token_id = app.services.authenticate(&token).await.unwrap().token_id;
    let key = format!("late-{}", Uuid::new_v4().simple());
    let delete = |client: reqwest::Client, address: String| {
        let (key, token) = (key.clone(), token.clone());
        let path = routes::runner_pool(tenant.workspace_id, pool);
        async move {
            client
                .delete(format!("{address}{path}"))
                .bearer_auth(token)
                .header("idempotency-key", key)
                .json(&json!({}))
                .send()
                .await
                .unwrap()
        }
    };
    let first = delete(app.client.clone(), app.address.clone()).await;
    assert!(first.status().is_success(), "{}", first.status());

    let (mut db, outcome) = take_outcome_out(&mut app).await;
    let server = late_outcome_server(&app);
    let cpctl = control_plane::startup::open_services(&app.config)
        .await
        .expect("cpctl opens the records store");
    let retry = tokio::spawn(delete(app.client.clone(), server.address.clone()));
    // The retry has authenticated and is held past its 404 (inside hold_then_put_back's first
    // second) when the token goes, as `cpctl tokens revoke` would end it. Revoked before the
    // retry authenticates, it is a plain 401: a slow machine only weakens the test.
    tokio::time::sleep(Duration::from_millis(500)).await;
    cpctl
        .revoke_token_access_as_admin(
            None,
            token_id,
            control_plane::domain::RevocationReason::parse("compromised").unwrap(),
            false,
            &control_plane::domain::CorrelationId::generate(),
        )
        .await
        .unwrap();
    hold_then_put_back(&mut db, &outcome).await;

    let retry = retry.await.unwrap();
    assert!(
        retry.headers().get("idempotency-replayed").is_none(),
        "no replay for a revoked caller"
    );
    assert_api_error(retry, 401, "unauthenticated").await;
}
