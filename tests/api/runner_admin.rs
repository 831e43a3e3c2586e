//! Runners and deliveries after the fact, against runners on loopback: a runner
//! failing for long enough is disabled with an event and never chosen until enabled; a removed
//! runner's keys are refused and its pending delivery goes to another runner; a resend is a new
//! attempt with the same `webhook-id`; a recovery resends only what failed since T, each once.

use std::time::Duration;

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, DispatchPayload, RetrySchedule};
use control_plane::service::ServiceError;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::loopback::{Answer, Loopback, runner_at, set_url, until};
use crate::support::runner::{fixture_with, register, report, submit};
use crate::support::{TestApp, sql_all, sql_value};

fn cid() -> CorrelationId {
    CorrelationId::generate()
}

/// A change written as `cpctl` wrote it from the store: by an unnamed administrator.
fn admin_write() -> control_plane::storage::WriteContext {
    control_plane::storage::WriteContext::admin(&cid())
}

/// A server retrying every 50 ms, `attempts` attempts in all (at most 20), with no breaker.
fn quick_retries(c: &mut ServerConfig, attempts: usize) {
    retries_every(c, attempts, "50ms");
}

fn retries_every(c: &mut ServerConfig, attempts: usize, wait: &str) {
    let schedule = std::iter::once("0s")
        .chain(std::iter::repeat_n(wait, attempts - 1))
        .collect::<Vec<_>>()
        .join(",");
    c.delivery_retry_schedule = RetrySchedule::parse(&schedule).unwrap();
    c.delivery_breaker_after = 0;
    // Retries are due between polls: look often.
    c.delivery_poll_ms = 20;
}

/// Every event of `event_type` about `target`: (actor kind, data).
async fn events(app: &TestApp, event_type: &str, target: Uuid) -> Vec<(String, Value)> {
    let rows: Vec<(String, String)> = sql_all!(
        &mut app.db().await,
        (String, String),
        "SELECT actor_kind, CAST(data AS TEXT) FROM audit_events
         WHERE event_type = $1 AND target_id = $2 ORDER BY occurred_at",
        event_type,
        target
    )
    .unwrap();
    rows.into_iter()
        .map(|(actor, data)| (actor, serde_json::from_str(&data).unwrap()))
        .collect()
}

async fn runner_status(
    app: &TestApp,
    pool: Uuid,
    runner: Uuid,
) -> control_plane::storage::RunnerStatus {
    app.services
        .list_runners(pool)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == runner)
        .expect("the runner is listed")
}

/// Attempts ever started to `runner`.
async fn attempts_to(app: &TestApp, runner: Uuid) -> i64 {
    sql_value!(
        app,
        i64,
        "SELECT count(*) FROM webhook_attempts WHERE runner_id = $1",
        runner
    )
}

/// Attempts to `runner` started and not yet answered.
async fn unanswered(app: &TestApp, runner: Uuid) -> i64 {
    sql_value!(
        app,
        i64,
        "SELECT count(*) FROM webhook_attempts
         WHERE runner_id = $1 AND finished_at IS NULL AND error IS NULL",
        runner
    )
}

fn dispatch(body: &[u8]) -> DispatchPayload {
    serde_json::from_slice(body).expect("a dispatch body")
}

fn conflict_code(e: ServiceError) -> &'static str {
    match e {
        ServiceError::Conflict { code, .. } => code,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[tokio::test]
async fn a_runner_failing_long_enough_is_disabled_with_an_event_and_enable_brings_it_back() {
    let (app, tenant, pool, runner) = fixture_with(|c| {
        // About two seconds of attempts, every 100 ms.
        retries_every(c, 20, "100ms");
        c.runner_disable_after_failures = 3;
        c.runner_disable_failing_secs = 1;
    })
    .await
    .parts();
    let failing = Loopback::scripted(&[], Answer::Status(500)).await;
    set_url(&app, runner.runner_id, &failing.url).await;
    let (_, first) = submit(&app, &tenant, pool).await;
    until("the failing runner is disabled", async || {
        runner_status(&app, pool, runner.runner_id)
            .await
            .disabled_at
            .is_some()
    })
    .await;
    let status = runner_status(&app, pool, runner.runner_id).await;
    assert_eq!(
        status.disabled_reason.as_deref(),
        Some("consecutive_failures")
    );
    // Both halves of the rule: three failures were not enough until a second had passed.
    let since = status.failing_since.expect("failing since");
    let disabled_at = status.disabled_at.unwrap();
    assert!(
        disabled_at - since >= chrono::Duration::seconds(1),
        "{since} {disabled_at}"
    );
    assert!(
        failing.received().len() > 3,
        "more than 3 failures within the first second: {:?}",
        app.services.delivery_report(first).await.unwrap()
    );
    let disabled = events(&app, "runner.disabled", runner.runner_id).await;
    assert_eq!(disabled.len(), 1, "{disabled:?}");
    let (actor, data) = &disabled[0];
    assert_eq!(actor, "system");
    assert_eq!(data["reason"], "consecutive_failures");
    assert!(data["failures"].as_i64().unwrap() >= 3, "{data}");
    assert!(data["since"].is_string(), "{data}");

    // Never chosen while disabled: nothing more reaches it, old delivery or new. Leases that
    // read the runner before its disable are done once a look begun after it is; their
    // attempts end at once (a 500).
    app.background_pass_after("deliveries", chrono::Utc::now())
        .await;
    until("the attempts already out end", async || {
        unanswered(&app, runner.runner_id).await == 0
    })
    .await;
    let before = failing.received().len();
    let attempts = attempts_to(&app, runner.runner_id).await;
    let (_, second) = submit(&app, &tenant, pool).await;
    // A look begun after the submission had both deliveries due, and chose no one.
    app.background_pass_after("deliveries", chrono::Utc::now())
        .await;
    assert_eq!(
        attempts_to(&app, runner.runner_id).await,
        attempts,
        "a disabled runner was chosen"
    );
    assert_eq!(
        failing.received().len(),
        before,
        "a disabled runner got a delivery"
    );

    // Enabled: its failures forgotten, and both deliveries go, with their own webhook-ids.
    failing.answer_at_once();
    app.services
        .enable_runner(
            runner.runner_id,
            &control_plane::storage::WriteContext::admin(&cid()),
        )
        .await
        .unwrap();
    let status = runner_status(&app, pool, runner.runner_id).await;
    assert_eq!(status.disabled_at, None);
    assert_eq!(status.consecutive_failures, 0);
    until("both deliveries reach the enabled runner", async || {
        let ids = failing.received_ids();
        ids.contains(&second.to_string()) && ids[before..].contains(&first.to_string())
    })
    .await;
    let enabled = events(&app, "runner.enabled", runner.runner_id).await;
    assert_eq!(enabled.len(), 1);
    assert_eq!(enabled[0].0, "admin");
    // Enabling an enabled runner changes nothing and writes no second event.
    let again = app
        .services
        .enable_runner(
            runner.runner_id,
            &control_plane::storage::WriteContext::admin(&cid()),
        )
        .await;
    assert!(!again.unwrap());
    assert_eq!(
        events(&app, "runner.enabled", runner.runner_id).await.len(),
        1
    );
}

#[tokio::test]
async fn a_runner_disabled_by_hand_is_never_chosen_while_another_of_the_pool_takes_its_share() {
    let (app, tenant, pool, runner) = fixture_with(|c| quick_retries(c, 3)).await.parts();
    let a = Loopback::start(&[]).await;
    let b = Loopback::start(&[]).await;
    set_url(&app, runner.runner_id, &a.url).await;
    runner_at(&app, pool, &b.url).await;
    app.services
        .disable_runner(
            runner.runner_id,
            &control_plane::storage::WriteContext::admin(&cid()),
        )
        .await
        .unwrap();
    let disabled = events(&app, "runner.disabled", runner.runner_id).await;
    assert_eq!(disabled.len(), 1);
    assert_eq!(disabled[0].0, "admin");
    assert_eq!(disabled[0].1["reason"], "admin");
    for _ in 0..4 {
        submit(&app, &tenant, pool).await;
    }
    b.wait_for(4).await;
    assert!(a.received().is_empty(), "a disabled runner got a delivery");

    app.services
        .enable_runner(
            runner.runner_id,
            &control_plane::storage::WriteContext::admin(&cid()),
        )
        .await
        .unwrap();
    for _ in 0..4 {
        submit(&app, &tenant, pool).await;
    }
    until("the enabled runner takes its turn", async || {
        !a.received().is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_removed_runner_is_refused_and_its_pending_delivery_goes_to_another_runner() {
    let (app, tenant, pool, runner) = fixture_with(|c| quick_retries(c, 3)).await.parts();
    let a = Loopback::start(&[]).await;
    set_url(&app, runner.runner_id, &a.url).await;
    let other = register(&app, pool, "runner-b").await;
    let (_, delivery) = submit(&app, &tenant, pool).await;
    // Acknowledged by the runner, never reported on: still pending.
    a.wait_for(1).await;
    let b = Loopback::start(&[]).await;
    set_url(&app, other.runner_id, &b.url).await;

    let removed = app
        .services
        .remove_runner(
            runner.runner_id,
            &control_plane::storage::WriteContext::admin(&cid()),
        )
        .await
        .unwrap();
    assert_eq!(removed.keys_revoked, 1);
    assert_eq!(removed.deliveries_moved, 1);
    let moved = b.wait_for(1).await;
    assert_eq!(moved[0].id, delivery.to_string(), "the same webhook-id");
    assert_eq!(dispatch(&moved[0].body).data.runner_id, other.runner_id);
    // Its signed reports are refused; the other runner's are not.
    let refused = report(&app, &runner, delivery, json!({"status": "received"})).await;
    assert_eq!(refused.status(), 401);
    let taken = report(&app, &other, delivery, json!({"status": "received"})).await;
    assert_eq!(taken.status(), 200);
    let status = runner_status(&app, pool, runner.runner_id).await;
    assert!(status.removed_at.is_some());
    assert!(status.keys.iter().all(|k| k.revoked_at.is_some()));
    let event = events(&app, "runner.removed", runner.runner_id).await;
    assert_eq!(event.len(), 1);
    assert_eq!(event[0].1["keysRevoked"], 1);
    // Never chosen again, and a second removal is refused.
    submit(&app, &tenant, pool).await;
    b.wait_for(2).await;
    assert_eq!(a.received().len(), 1);
    let again = app
        .services
        .remove_runner(
            runner.runner_id,
            &control_plane::storage::WriteContext::admin(&cid()),
        )
        .await;
    assert_eq!(conflict_code(again.unwrap_err()), "invalid_state");

    // A key that reached the store after the removal (an `add key` that passed its check just
    // before the removal committed) reads as revoked: the removed runner stays out.
    let (seed, public) = control_plane::domain::generate_keypair();
    let late = control_plane::storage::RunnerKey {
        id: Uuid::new_v4(),
        runner_id: runner.runner_id,
        public_key: public.to_vec(),
        created_at: chrono::Utc::now(),
        revoked_at: None,
    };
    let audit = control_plane::domain::NewAuditEvent {
        organisation_id: tenant.organisation_id,
        workspace_id: Some(tenant.workspace_id),
        event_type: "runner.key_added",
        actor: control_plane::domain::Actor::admin(),
        target_kind: "runner",
        target_id: runner.runner_id,
        correlation_id: cid().to_string(),
        occurred_at: chrono::Utc::now(),
        data: json!({ "keyId": late.id }),
    };
    let write = control_plane::storage::WriteContext::admin(&cid());
    let store = app.services.store();
    store.add_runner_key(&write, &late, &audit).await.unwrap();
    let late_key = crate::support::runner::RunnerKey {
        runner_id: runner.runner_id,
        key_id: late.id,
        private_key: seed,
    };
    let refused = report(&app, &late_key, delivery, json!({"status": "running"})).await;
    assert_eq!(
        refused.status(),
        401,
        "a removed runner's late key authenticated"
    );
}

#[tokio::test]
async fn removing_a_pool_s_last_runner_leaves_its_delivery_waiting_for_another() {
    let (app, tenant, pool, runner) = fixture_with(|c| quick_retries(c, 3)).await.parts();
    let a = Loopback::start(&[]).await;
    set_url(&app, runner.runner_id, &a.url).await;
    let (_, delivery) = submit(&app, &tenant, pool).await;
    a.wait_for(1).await;
    app.services
        .remove_runner(
            runner.runner_id,
            &control_plane::storage::WriteContext::admin(&cid()),
        )
        .await
        .unwrap();
    until("the delivery waits for a runner", async || {
        let d = app
            .services
            .list_deliveries(pool, None, None, 10)
            .await
            .unwrap();
        d.iter().any(|d| d.id == delivery && d.waiting_for_runner)
    })
    .await;
    let b = Loopback::start(&[]).await;
    runner_at(&app, pool, &b.url).await;
    let got = b.wait_for(1).await;
    assert_eq!(got[0].id, delivery.to_string());
}

#[tokio::test]
async fn a_resent_pending_delivery_is_a_new_attempt_with_the_same_webhook_id() {
    let (app, tenant, pool, runner) = fixture_with(|c| quick_retries(c, 3)).await.parts();
    let a = Loopback::start(&[]).await;
    set_url(&app, runner.runner_id, &a.url).await;
    let (command, delivery) = submit(&app, &tenant, pool).await;
    a.wait_for(1).await;
    until("the first attempt's answer is recorded", async || {
        let report = app.services.delivery_report(delivery).await.unwrap();
        report
            .attempts
            .first()
            .is_some_and(|a| a.finished_at.is_some())
            && report.next_attempt_at.is_none()
    })
    .await;
    let resent = app
        .services
        .resend_delivery(delivery, &admin_write())
        .await
        .unwrap();
    assert_eq!(resent.sent_as, delivery);
    assert_eq!(resent.new_command_id, None);
    let got = a.wait_for(2).await;
    assert_eq!(got[0].id, got[1].id, "one webhook-id");
    assert_eq!(got[1].id, delivery.to_string());
    assert_eq!(dispatch(&got[1].body).data.attempt, 2);
    assert_eq!(dispatch(&got[1].body).data.command_id, command);
    let event = events(&app, "webhook_delivery.resent", delivery).await;
    assert_eq!(event.len(), 1);
    assert_eq!(event[0].0, "admin");
    assert_eq!(event[0].1["webhookId"], delivery.to_string());

    // Once the runner reports it, it is no longer pending: a resend is refused.
    let taken = report(&app, &runner, delivery, json!({"status": "received"})).await;
    assert_eq!(taken.status(), 200);
    let refused = app.services.resend_delivery(delivery, &admin_write()).await;
    assert_eq!(conflict_code(refused.unwrap_err()), "invalid_state");
    let unknown = app
        .services
        .resend_delivery(Uuid::new_v4(), &admin_write())
        .await;
    assert!(matches!(unknown, Err(ServiceError::NotFound { .. })));
}

/// A delivery whose every attempt failed (the runner answers 500 twice).
async fn failed_delivery(app: &TestApp, tenant: &crate::support::Tenant, pool: Uuid) -> Uuid {
    let (_, delivery) = submit(app, tenant, pool).await;
    until("the delivery fails", async || {
        app.services
            .delivery_report(delivery)
            .await
            .unwrap()
            .status
            .as_str()
            == "failed"
    })
    .await;
    delivery
}

#[tokio::test]
async fn a_resent_failed_delivery_is_a_new_command_with_the_failed_one_s_webhook_id() {
    let (app, tenant, pool, runner) = fixture_with(|c| quick_retries(c, 2)).await.parts();
    let a = Loopback::scripted(&[], Answer::Status(500)).await;
    set_url(&app, runner.runner_id, &a.url).await;
    let delivery = failed_delivery(&app, &tenant, pool).await;
    let failed = app.services.delivery_report(delivery).await.unwrap();
    a.answer_at_once();

    let resent = app
        .services
        .resend_delivery(delivery, &admin_write())
        .await
        .unwrap();
    let new_command = resent.new_command_id.expect("a new command");
    assert_ne!(resent.sent_as, delivery);
    let got = a.wait_for(3).await;
    assert_eq!(
        got[2].id,
        delivery.to_string(),
        "the failed delivery's webhook-id"
    );
    let body = dispatch(&got[2].body);
    assert_eq!(body.data.delivery_id, resent.sent_as);
    assert_eq!(body.data.command_id, new_command);
    // The failed command stays failed (final in the v1 contract); the new one is reported on.
    let after = app.services.delivery_report(delivery).await.unwrap();
    assert_eq!(after.status.as_str(), "failed");
    assert_eq!(after.command_status.as_str(), "failed");
    assert_eq!(after.command_id, failed.command_id);
    let taken = report(&app, &runner, resent.sent_as, json!({"status": "received"})).await;
    assert_eq!(taken.status(), 200);
    let event = events(&app, "webhook_delivery.resent", delivery).await;
    assert_eq!(event[0].1["newCommandId"], new_command.to_string());
    // The new command is announced as submitted, naming the one it was resent from.
    let submitted = events(&app, "runner_command.submitted", new_command).await;
    assert_eq!(submitted.len(), 1);
    assert_eq!(submitted[0].0, "admin");
    assert_eq!(submitted[0].1["resentFrom"], failed.command_id.to_string());
    assert_eq!(submitted[0].1["deliveryId"], resent.sent_as.to_string());
    // Resent once.
    let again = app.services.resend_delivery(delivery, &admin_write()).await;
    assert_eq!(conflict_code(again.unwrap_err()), "invalid_state");
}

#[tokio::test]
async fn a_recovery_resends_only_what_failed_since_t_each_once() {
    let (app, tenant, pool, runner) = fixture_with(|c| quick_retries(c, 2)).await.parts();
    let a = Loopback::scripted(&[], Answer::Status(500)).await;
    set_url(&app, runner.runner_id, &a.url).await;
    let before = failed_delivery(&app, &tenant, pool).await;
    // Real time between `before`'s failure and `since`, as the server's clock stamps them.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let since = chrono::Utc::now();
    let one = failed_delivery(&app, &tenant, pool).await;
    let two = failed_delivery(&app, &tenant, pool).await;
    a.answer_at_once();
    let sent = a.received().len();

    let resent = app
        .services
        .recover_deliveries(pool, since, &admin_write())
        .await
        .unwrap();
    let mut ids: Vec<Uuid> = resent.iter().map(|r| r.delivery_id).collect();
    ids.sort();
    let mut expected = vec![one, two];
    expected.sort();
    assert_eq!(ids, expected);
    let got = a.wait_for(sent + 2).await;
    let mut webhook_ids: Vec<String> = got[sent..].iter().map(|r| r.id.clone()).collect();
    webhook_ids.sort();
    let mut expected: Vec<String> = expected.iter().map(Uuid::to_string).collect();
    expected.sort();
    assert_eq!(webhook_ids, expected, "one webhook-id per failed delivery");
    // Again: nothing left to resend, and nothing more sent.
    let again = app
        .services
        .recover_deliveries(pool, since, &admin_write())
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");
    // A look begun after it found nothing due either.
    app.background_pass_after("deliveries", chrono::Utc::now())
        .await;
    assert_eq!(attempts_to(&app, runner.runner_id).await, sent as i64 + 2);
    assert_eq!(a.received().len(), sent + 2);
    assert!(!a.received_ids()[sent..].contains(&before.to_string()));
}

/// A disabled runner finishes what it was sent and nothing else: its signed report on a
/// delivery sent to it is taken; one on another runner's delivery of its pool, or on an id that
/// names nothing, is the same 403 `runner_disabled`, and changes nothing. Enabled again, it
/// reports on any delivery of its pool, as before.
#[tokio::test]
async fn a_disabled_runner_reports_only_on_the_deliveries_sent_to_it() {
    let (app, tenant, pool, runner) = fixture_with(|c| quick_retries(c, 3)).await.parts();
    let a = Loopback::start(&[]).await;
    set_url(&app, runner.runner_id, &a.url).await;
    let (_, held) = submit(&app, &tenant, pool).await;
    a.wait_for(1).await;
    let other = register(&app, pool, "runner-b").await;
    let b = Loopback::start(&[]).await;
    set_url(&app, other.runner_id, &b.url).await;
    app.services
        .disable_runner(
            runner.runner_id,
            &control_plane::storage::WriteContext::admin(&cid()),
        )
        .await
        .unwrap();
    let (_, elsewhere) = submit(&app, &tenant, pool).await;
    assert_eq!(b.wait_for(1).await[0].id, elsewhere.to_string());

    let taken = report(&app, &runner, held, json!({"status": "received"})).await;
    assert_eq!(taken.status(), 200, "{}", taken.text().await.unwrap());
    for (what, delivery) in [
        ("another runner's delivery", elsewhere),
        ("a delivery that does not exist", Uuid::new_v4()),
    ] {
        let refused = report(&app, &runner, delivery, json!({"status": "received"})).await;
        let body = crate::support::assert_api_error(refused, 403, "forbidden").await;
        assert_eq!(
            body["error"]["details"]["reason"], "runner_disabled",
            "{what}: {body}"
        );
    }
    assert_eq!(
        crate::support::runner::delivery_status(&app, elsewhere).await,
        "pending",
        "the refused report changed nothing"
    );

    app.services
        .enable_runner(
            runner.runner_id,
            &control_plane::storage::WriteContext::admin(&cid()),
        )
        .await
        .unwrap();
    let taken = report(&app, &runner, elsewhere, json!({"status": "received"})).await;
    assert_eq!(taken.status(), 200, "{}", taken.text().await.unwrap());
}
