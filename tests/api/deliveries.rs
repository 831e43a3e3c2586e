//! Outgoing webhook deliveries, against a real HTTP receiver on loopback: a submitted command
//! reaches a runner signed by the control plane's key; failures are retried on the schedule
//! with the same `webhook-id`; a dead runner's command fails once the schedule runs out; a
//! replica killed mid-attempt leaves the delivery to another replica, same `webhook-id`.

use std::time::Duration;

use control_plane::domain::{CorrelationId, DispatchPayload, WebhookKeys, verify_webhook};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::loopback::{Answer, Loopback, PATIENCE, Received, dead_url, set_url};
use crate::support::runner::{Fixture, fixture_on, fixture_with, report, submit};
use crate::support::{ServerProcess, TestApp, needs, spawn_app_with, sql_one, sql_value};

/// A tenant with a pool and a runner, on a server retrying on `schedule`.
async fn with_schedule(schedule: &str) -> Fixture {
    let schedule = control_plane::domain::RetrySchedule::parse(schedule).unwrap();
    fixture_on(spawn_app_with(|c| c.delivery_retry_schedule = schedule).await).await
}

/// The server's published keys, as a runner on the `v1a` path verifies with them.
pub(crate) fn published_keys(app: &TestApp) -> WebhookKeys {
    WebhookKeys {
        published: app
            .services
            .webhook_signer()
            .public_keys()
            .into_iter()
            .map(|k| k.key)
            .collect(),
        secrets: vec![],
    }
}

/// The request verifies with the server's public keys, and its body is the dispatch for the
/// runner it names.
async fn verified(app: &TestApp, request: &Received) -> DispatchPayload {
    let keys = published_keys(app);
    let named: DispatchPayload = serde_json::from_slice(&request.body).expect("a dispatch body");
    let now = chrono::Utc::now().timestamp();
    verify_webhook(&request.as_webhook(), &keys, named.data.runner_id, now, 300)
        .expect("the delivery verifies with the published key")
}

async fn delivery_state(app: &TestApp, delivery: Uuid) -> (String, String) {
    sql_one!(
        &mut app.db().await,
        (String, String),
        "SELECT d.status, c.status FROM webhook_deliveries d
         JOIN runner_commands c ON c.id = d.command_id WHERE d.id = $1",
        delivery
    )
    .unwrap()
}

/// Waits until the delivery's report satisfies `done`.
async fn report_until(
    app: &TestApp,
    delivery: Uuid,
    done: impl Fn(&control_plane::storage::DeliveryReport) -> bool,
) -> control_plane::storage::DeliveryReport {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let report = app.services.delivery_report(delivery).await.unwrap();
        if done(&report) {
            return report;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the delivery did not get there: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_command_reaches_its_runner_signed_and_the_runner_reports_it_to_success() {
    let receiver = Loopback::start(&[Answer::Status(202)]).await;
    let (app, tenant, pool, runner) = fixture_on(spawn_app_with(|_| {}).await).await.parts();
    set_url(&app, runner.runner_id, &receiver.url).await;
    let (command, delivery) = submit(&app, &tenant, pool).await;

    let received = receiver.wait_for(1).await;
    assert_eq!(
        received[0].id,
        delivery.to_string(),
        "webhook-id is the delivery"
    );
    let payload = verified(&app, &received[0]).await;
    assert_eq!(payload.event_type, "runner_command.dispatched");
    assert_eq!(payload.data.delivery_id, delivery);
    assert_eq!(payload.data.command_id, command);
    assert_eq!(payload.data.runner_id, runner.runner_id);
    assert_eq!(payload.data.command, "make");
    assert_eq!(payload.data.args, vec!["test".to_owned()]);
    assert_eq!(payload.data.attempt, 1);

    // A 2xx moves nothing by itself, and nothing more is sent.
    let sent = report_until(&app, delivery, |r| {
        r.attempts.first().is_some_and(|a| a.finished_at.is_some())
    })
    .await;
    assert_eq!(sent.attempts.len(), 1);
    assert_eq!(sent.attempts[0].status_code, Some(202));
    assert_eq!(sent.attempts[0].error, None);
    assert_eq!(sent.next_attempt_at, None);
    assert_eq!(
        delivery_state(&app, delivery).await,
        ("pending".into(), "queued".into())
    );

    for status in ["received", "running", "succeeded"] {
        let response = report(&app, &runner, delivery, json!({"status": status})).await;
        assert_eq!(response.status(), 200, "{status}");
    }
    assert_eq!(
        delivery_state(&app, delivery).await,
        ("succeeded".into(), "succeeded".into())
    );
    // Sent once: nothing is scheduled, and a look of the dispatcher's begun after the last
    // report found nothing due.
    app.background_pass_after("deliveries", chrono::Utc::now())
        .await;
    let done = app.services.delivery_report(delivery).await.unwrap();
    assert_eq!(done.next_attempt_at, None, "nothing scheduled");
    assert_eq!(done.attempts.len(), 1, "sent once");
    assert_eq!(receiver.received().len(), 1, "sent once");
}

#[tokio::test]
async fn failures_are_retried_on_the_schedule_with_the_same_webhook_id_until_a_2xx() {
    let receiver = Loopback::start(&[Answer::Status(500), Answer::Status(307)]).await;
    let (app, tenant, pool, runner) = with_schedule("0s,200ms,200ms,5m").await.parts();
    set_url(&app, runner.runner_id, &receiver.url).await;
    let (_, delivery) = submit(&app, &tenant, pool).await;

    let received = receiver.wait_for(3).await;
    let done = report_until(&app, delivery, |r| {
        r.attempts.len() == 3 && r.attempts[2].finished_at.is_some()
    })
    .await;
    for (i, request) in received.iter().enumerate() {
        assert_eq!(request.id, delivery.to_string());
        assert_eq!(verified(&app, request).await.data.attempt as usize, i + 1);
    }
    let codes: Vec<_> = done.attempts.iter().map(|a| a.status_code).collect();
    assert_eq!(codes, vec![Some(500), Some(307), Some(204)]);
    assert_eq!(done.attempts[0].error.as_deref(), Some("HTTP 500"));
    assert!(
        done.attempts[1]
            .error
            .as_deref()
            .unwrap()
            .contains("redirects are not followed"),
        "{:?}",
        done.attempts[1]
    );
    assert_eq!(done.attempts[2].error, None);
    assert_eq!(done.next_attempt_at, None);
    assert_eq!(done.status.as_str(), "pending", "a 2xx moves nothing");
    // The runner is healthy again: its failures in a row were forgotten by the 2xx.
    let failures = sql_value!(
        app,
        i32,
        "SELECT consecutive_failures FROM runners WHERE id = $1",
        runner.runner_id
    );
    assert_eq!(failures, 0);
}

#[tokio::test]
async fn a_dead_runner_exhausts_the_schedule_and_its_command_fails_once_with_an_event() {
    let (app, tenant, pool, runner) = with_schedule("0s,100ms,100ms").await.parts();
    set_url(&app, runner.runner_id, &dead_url().await).await;
    let (command, delivery) = submit(&app, &tenant, pool).await;

    let failed = report_until(&app, delivery, |r| r.status.as_str() == "failed").await;
    assert_eq!(failed.attempts.len(), 3);
    for attempt in &failed.attempts {
        assert_eq!(attempt.status_code, None);
        let error = attempt.error.as_deref().unwrap();
        assert!(error.starts_with("could not connect"), "{error}");
        assert!(!error.contains("127.0.0.1"), "no URL in the error: {error}");
    }
    assert_eq!(failed.command_status.as_str(), "failed");
    assert_eq!(failed.next_attempt_at, None);
    assert!(
        failed
            .detail
            .as_deref()
            .unwrap()
            .contains("after 3 attempts"),
        "{:?}",
        failed.detail
    );
    // Failed once: a look of the dispatcher's begun after the failure sent nothing more.
    app.background_pass_after("deliveries", chrono::Utc::now())
        .await;
    let after = app.services.delivery_report(delivery).await.unwrap();
    assert_eq!(after.attempts.len(), 3, "no attempt after the last");
    let (events, actor_kind): (i64, Option<String>) = sql_one!(
        &mut app.db().await,
        (i64, Option<String>),
        "SELECT count(*), max(actor_kind) FROM audit_events
         WHERE event_type = 'webhook_delivery.failed' AND target_id = $1",
        delivery
    )
    .unwrap();
    assert_eq!(events, 1);
    assert_eq!(actor_kind.as_deref(), Some("system"));
    // Readers of the event learn the kind of failure, never its detail.
    let data = failure_event(&app, delivery).await;
    assert_eq!(data["lastErrorCategory"], "connect", "{data}");
    assert!(data.get("lastError").is_none(), "{data}");
    assert_eq!(failed.command_id, command);
    // A late report meets the state machine.
    let response = report(&app, &runner, delivery, json!({"status": "received"})).await;
    assert_eq!(response.status(), 409);
}

/// The data of a delivery's `webhook_delivery.failed` event.
async fn failure_event(app: &TestApp, delivery: Uuid) -> Value {
    let (data,): (String,) = sql_one!(
        &mut app.db().await,
        (String,),
        "SELECT CAST(data AS TEXT) FROM audit_events
         WHERE event_type = 'webhook_delivery.failed' AND target_id = $1",
        delivery
    )
    .unwrap();
    serde_json::from_str(&data).unwrap()
}

/// A runner URL where something other than TLS answers (here a plain HTTP receiver; in the
/// report that found it, Postgres): the attempts record the TLS error, the event only `tls`,
/// so `activity:read` cannot fingerprint what listens there.
#[tokio::test]
async fn a_delivery_failure_event_names_its_category_and_leaves_the_detail_to_the_attempts() {
    let receiver = Loopback::start(&[]).await;
    let (app, tenant, pool, runner) = with_schedule("0s,50ms").await.parts();
    let https = receiver.url.replacen("http://", "https://", 1);
    set_url(&app, runner.runner_id, &https).await;
    let (_, delivery) = submit(&app, &tenant, pool).await;
    let failed = report_until(&app, delivery, |r| r.status.as_str() == "failed").await;
    for attempt in &failed.attempts {
        let error = attempt.error.as_deref().unwrap();
        assert!(error.starts_with("TLS failed"), "{error}");
    }
    let detail = failed.detail.as_deref().unwrap();
    assert!(detail.contains("the last: tls"), "{detail}");
    // The event was written in the transaction that failed the delivery: no wait.
    let data = failure_event(&app, delivery).await;
    assert_eq!(data["lastErrorCategory"], "tls", "{data}");
    assert!(!data.to_string().contains("TLS failed"), "{data}");
}

#[tokio::test]
async fn a_failing_runner_is_skipped_for_a_healthy_one_of_its_pool() {
    let receiver = Loopback::start(&[]).await;
    let (app, tenant, pool, runner) = with_schedule("0s,50ms,50ms,50ms,50ms").await.parts();
    set_url(&app, runner.runner_id, &dead_url().await).await;
    let healthy = app
        .services
        .register_runner(
            pool,
            "runner-b",
            None,
            Some(&receiver.url),
            &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
        )
        .await
        .unwrap()
        .runner
        .id;
    // Every command gets to the healthy runner, whichever was tried first.
    let mut deliveries = Vec::new();
    for _ in 0..6 {
        deliveries.push(submit(&app, &tenant, pool).await.1);
    }
    receiver.wait_for(6).await;
    for delivery in &deliveries {
        let done = report_until(&app, *delivery, |r| {
            r.attempts
                .last()
                .is_some_and(|a| a.finished_at.is_some() && a.error.is_none())
        })
        .await;
        assert_eq!(done.attempts.last().unwrap().runner_id, healthy);
    }
    // Once the dead runner failed three times in a row, it was no longer tried.
    let tried_dead = sql_value!(
        app,
        i64,
        "SELECT count(*) FROM webhook_attempts WHERE runner_id = $1",
        runner.runner_id
    );
    assert!(
        tried_dead <= 4,
        "the failing runner was tried {tried_dead} times"
    );
}

#[tokio::test]
async fn delivery_urls_are_checked_against_the_egress_rule() {
    let Fixture { app, runner, .. } = fixture_on(spawn_app_with(|_| {}).await).await;
    for bad in [
        "http://runner.example/hooks",
        "https://user:secret@runner.example/hooks",
        "ftp://127.0.0.1/hooks",
        "not a url",
        "https://169.254.169.254/latest/meta-data/iam/",
        "https://metadata.google.internal/computeMetadata/v1/",
    ] {
        let err = app
            .services
            .set_runner_url(
                runner.runner_id,
                Some(bad),
                &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
            )
            .await
            .expect_err(bad);
        let message = format!("{err:?}");
        assert!(!message.contains("secret"), "{message}");
    }
    // https anywhere, http to loopback (the default list).
    for good in [
        "https://runner.example/hooks",
        "http://localhost:9000/hooks",
    ] {
        set_url(&app, runner.runner_id, good).await;
    }
}

/// A delivery waiting for a runner (its pool had none with a URL) is sent once one gets a URL.
#[tokio::test]
async fn a_delivery_waits_for_a_runner_with_a_url_and_goes_when_one_appears() {
    let receiver = Loopback::start(&[]).await;
    let (app, tenant, pool, runner) =
        fixture_on(spawn_app_with(|c| c.delivery_poll_ms = 100).await)
            .await
            .parts();
    let (_, delivery) = submit(&app, &tenant, pool).await;
    // Looked at, found no runner: waiting, not polled.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let waiting = sql_value!(
            app,
            bool,
            "SELECT waiting_for_runner FROM webhook_deliveries WHERE id = $1",
            delivery
        );
        if waiting {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never set waiting");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(receiver.received().is_empty());
    set_url(&app, runner.runner_id, &receiver.url).await;
    let received = receiver.wait_for(1).await;
    assert_eq!(received[0].id, delivery.to_string());
}

/// A replica killed while its attempt is in flight: the attempt is left unfinished, the lease
/// ends, and another replica sends the delivery again with the same `webhook-id`.
#[tokio::test]
async fn postgres_only_a_replica_killed_mid_attempt_leaves_the_delivery_to_another() {
    needs!(Postgres);
    const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
    let receiver = Loopback::start(&[Answer::Hang(Duration::from_secs(60))]).await;
    // This test's own app sends nothing: the replicas below do.
    let (app, tenant, pool, runner) = fixture_with(|c| {
        c.token_hash_key = Some(HASH_KEY.into());
        c.delivery_concurrency = 0;
    })
    .await
    .parts();
    set_url(&app, runner.runner_id, &receiver.url).await;
    let env = [("CP_DELIVERY_TIMEOUT_MS", "2000")];
    let first = ServerProcess::start_with_env(&app.config, HASH_KEY, RECORD_KEY, &env);
    let (_, delivery) = submit(&app, &tenant, pool).await;
    receiver.wait_for(1).await;
    drop(first); // SIGKILL, mid-attempt.
    let _second = ServerProcess::start_with_env(&app.config, HASH_KEY, RECORD_KEY, &env);

    let received = receiver.wait_for(2).await;
    assert_eq!(received[0].id, received[1].id);
    assert_eq!(received[1].id, delivery.to_string());
    let done = report_until(&app, delivery, |r| {
        r.attempts.len() == 2 && r.attempts[1].finished_at.is_some()
    })
    .await;
    let abandoned = &done.attempts[0];
    assert_eq!(abandoned.finished_at, None);
    assert!(
        abandoned.error.as_deref().unwrap().starts_with("abandoned"),
        "{abandoned:?}"
    );
    assert_eq!(done.attempts[1].status_code, Some(204));
    // No third send: nothing is scheduled, and a look of the surviving replica's begun after
    // the second attempt ended found nothing due.
    crate::support::background_pass_after(&_second.address, "deliveries", chrono::Utc::now()).await;
    let after = app.services.delivery_report(delivery).await.unwrap();
    assert_eq!(after.next_attempt_at, None, "nothing scheduled");
    assert_eq!(after.attempts.len(), 2, "no third attempt");
    assert_eq!(receiver.received().len(), 2, "no third send");
}
