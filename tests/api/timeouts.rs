//! Runner commands past their `timeoutSeconds`: failed by the server's sweep, once, with their
//! delivery, freeing their pool; a late report is refused.

use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::runner::command_status_of;
use crate::support::runner::{fixture_with, report};
use crate::support::{
    ServerProcess, Tenant, TestApp, assert_api_error, create_pool, events_about, needs, routes,
    spawn_app_with, sql_all, sql_one, sql_value,
};

const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

/// How long a test waits for the sweep before it gives up: a bound, not a speed expected.
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_command_past_its_timeout_fails_once_with_its_delivery_and_frees_its_pool() {
    let (app, tenant, pool, runner) = fixture_with(|c| c.command_timeout_sweep_secs = 1)
        .await
        .parts();
    // Never picked up.
    let (queued, queued_delivery) = submit(&app, &tenant, pool, 1).await;
    // Picked up, then the runner goes silent (a longer timeout, so the report lands first).
    let (dispatched, dispatched_delivery) = submit(&app, &tenant, pool, 3).await;
    let response = report(
        &app,
        &runner,
        dispatched_delivery,
        json!({"status": "received"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    // A command elsewhere with time left is not touched.
    let other_pool = create_pool(&app, tenant.workspace_id, "patient").await;
    let (patient, _) = submit(&app, &tenant, other_pool, 3600).await;

    for (command, delivery, timeout, from, delivery_from) in [
        (queued, queued_delivery, 1, "queued", "pending"),
        (dispatched, dispatched_delivery, 3, "dispatched", "received"),
    ] {
        let event = timed_out_event(&app, &tenant, command).await;
        assert_eq!(event["actor"]["kind"], "system", "{event}");
        assert!(event["actor"]["id"].is_null(), "{event}");
        assert_eq!(event["target"]["kind"], "runner_command");
        assert_eq!(event["data"]["from"], from, "{event}");
        assert_eq!(event["data"]["to"], "failed");
        assert_eq!(event["data"]["deliveryFrom"], delivery_from, "{event}");
        assert_eq!(event["data"]["deliveryId"], delivery.to_string());
        assert_eq!(event["data"]["timeoutSeconds"], timeout);
        assert_eq!(event["data"]["reason"], "timed out");

        assert_eq!(command_status_of(&app, command).await, "failed");
        let (status, detail) = delivery_of(&app, delivery).await;
        assert_eq!(status, "failed");
        let detail = detail.expect("a detail");
        assert!(detail.contains("timed out"), "{detail}");
    }

    // A later sweep (begun after both failed) finds nothing more to do with them: still one
    // event each.
    app.background_pass_after("command_timeouts", chrono::Utc::now())
        .await;
    for command in [queued, dispatched] {
        assert_eq!(timed_out_events(&app, command).await, 1);
    }
    assert_eq!(command_status_of(&app, patient).await, "queued");

    // The runner's late reports meet the state machine.
    for (delivery, status) in [
        (queued_delivery, "received"),
        (dispatched_delivery, "running"),
        (dispatched_delivery, "succeeded"),
        (dispatched_delivery, "failed"),
    ] {
        let response = report(&app, &runner, delivery, json!({"status": status})).await;
        let err = assert_api_error(response, 409, "invalid_transition").await;
        assert_eq!(err["error"]["details"]["from"], "failed", "{err}");
    }
    assert_eq!(delivery_of(&app, dispatched_delivery).await.0, "failed");

    // The pool holds nothing open any more: deleted without force, nothing cancelled.
    let body: Value = app
        .delete_ok(
            &routes::runner_pool(tenant.workspace_id, pool),
            &tenant.token,
            &json!({"reason": "runner lost"}),
        )
        .await;
    assert_eq!(body["cancelledCommands"], 0);

    assert_log_has_no_gaps(&app, tenant.workspace_id).await;
}

/// Three sweepers on one Postgres (this process and two server processes, each every second):
/// every command is failed once, with one event, and the log keeps its sequence.
#[tokio::test]
async fn postgres_only_replicas_sweeping_together_fail_each_command_once() {
    needs!(Postgres);
    let app = spawn_app_with(|c| {
        c.token_hash_key = Some(HASH_KEY.into());
        c.command_timeout_sweep_secs = 1;
    })
    .await;
    let tenant = app.bootstrap().await;
    let pool = create_pool(&app, tenant.workspace_id, "racing").await;
    let _a = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let _b = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);

    let mut commands = Vec::new();
    for _ in 0..40 {
        commands.push(submit(&app, &tenant, pool, 1).await.0);
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let open = sql_value!(
            app,
            i64,
            "SELECT count(*) FROM runner_commands WHERE pool_id = $1 AND status <> 'failed'",
            pool
        );
        if open == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{open} commands still open"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every sweeper has had another round at them: a sweep of each begun after all failed.
    let failed_by = chrono::Utc::now();
    app.background_pass_after("command_timeouts", failed_by)
        .await;
    for replica in [&_a, &_b] {
        crate::support::background_pass_after(&replica.address, "command_timeouts", failed_by)
            .await;
    }
    let targets = sql_all!(
        &mut app.db().await,
        (Uuid,),
        "SELECT target_id FROM audit_events WHERE event_type = 'runner_command.timed_out'"
    )
    .unwrap();
    let mut targets: Vec<Uuid> = targets.into_iter().map(|(id,)| id).collect();
    targets.sort();
    commands.sort();
    assert_eq!(targets, commands, "one event per command");
    let failed = sql_value!(
        app,
        i64,
        "SELECT count(*) FROM webhook_deliveries d JOIN runner_commands c ON c.id = d.command_id
         WHERE c.pool_id = $1 AND d.status = 'failed'",
        pool
    );
    assert_eq!(failed, 40);
    assert_log_has_no_gaps(&app, tenant.workspace_id).await;
}

/// Submits `make test` with `timeoutSeconds`; returns (command id, delivery id).
async fn submit(app: &TestApp, tenant: &Tenant, pool: Uuid, timeout: u32) -> (Uuid, Uuid) {
    let body: Value = app.post_ok(
            &routes::runner_commands(tenant.workspace_id),
            &tenant.token,
            &json!({"poolId": pool, "command": "make", "args": ["test"], "timeoutSeconds": timeout}),
        ).await;
    let id = |field: &str| -> Uuid { body["command"][field].as_str().unwrap().parse().unwrap() };
    (id("id"), id("deliveryId"))
}

/// Reads the workspace's activity, as a client would, until the command's timeout event is
/// there (at most [`PATIENCE`]).
async fn timed_out_event(app: &TestApp, tenant: &Tenant, command: Uuid) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let page: Value = app.activity(tenant, "?limit=100").await;
        let found: Vec<&Value> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                e["type"] == "runner_command.timed_out" && e["target"]["id"] == command.to_string()
            })
            .collect();
        match found.as_slice() {
            [] => {}
            [one] => return (*one).clone(),
            more => panic!("{} timeout events for one command", more.len()),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command did not time out"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn timed_out_events(app: &TestApp, command: Uuid) -> i64 {
    events_about(app, "runner_command.timed_out", command)
        .await
        .0
}

async fn delivery_of(app: &TestApp, delivery: Uuid) -> (String, Option<String>) {
    sql_one!(
        &mut app.db().await,
        (String, Option<String>),
        "SELECT status, detail FROM webhook_deliveries WHERE id = $1",
        delivery
    )
    .unwrap()
}

/// The workspace's sequence runs 1, 2, … with neither gap nor repeat.
async fn assert_log_has_no_gaps(app: &TestApp, workspace: Uuid) {
    let (count, distinct, max) = sql_one!(
        &mut app.db().await,
        (i64, i64, Option<i64>),
        "SELECT count(*), count(DISTINCT seq), max(seq) FROM audit_events WHERE workspace_id = $1",
        workspace
    )
    .unwrap();
    assert_eq!((count, distinct, max), (count, count, Some(count)));
}
