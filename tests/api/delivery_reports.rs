//! Signed delivery reports as a runner sends them: the delivery state machine and its
//! command, concurrent and twin reports, body validation, a report only on its own pool's
//! deliveries, and idempotency keys on reports (docs/contract.md, operation 7).

use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::runner::{
    command_status_of, delivery_status, fixture, now, register, report, send, sign, status_path,
    submit,
};
use crate::support::{
    Call, assert_api_error, create_pool, error_shape, events_about, routes, sql_one, sql_value,
};

const REPORTED: &str = "webhook_delivery.status_reported";

#[tokio::test]
async fn a_delivery_moves_received_running_succeeded_and_its_command_follows() {
    let (app, tenant, pool, runner) = fixture().await.parts();
    let (command, delivery) = submit(&app, &tenant, pool).await;

    for (status, command_status) in [
        ("received", "dispatched"),
        ("running", "running"),
        ("succeeded", "succeeded"),
    ] {
        let response = report(&app, &runner, delivery, json!({"status": status})).await;
        assert_eq!(response.status(), 200, "{status}");
        assert!(response.headers().contains_key("x-correlation-id"));
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["delivery"]["id"], delivery.to_string());
        assert_eq!(body["delivery"]["commandId"], command.to_string());
        assert_eq!(body["delivery"]["status"], status);
        assert!(
            chrono::DateTime::parse_from_rfc3339(body["delivery"]["updatedAt"].as_str().unwrap())
                .is_ok(),
            "{body}"
        );
        assert_eq!(delivery_status(&app, delivery).await, status);
        assert_eq!(command_status_of(&app, command).await, command_status);
    }

    // A finished command takes no more reports.
    let response = report(&app, &runner, delivery, json!({"status": "failed"})).await;
    assert_api_error(response, 409, "invalid_transition").await;

    // Each report is audited with the runner as its actor.
    let n = sql_value!(
        app,
        i64,
        "SELECT count(*) FROM audit_events
         WHERE event_type = 'webhook_delivery.status_reported'
           AND actor_kind = 'runner' AND actor_id = $1 AND target_id = $2",
        runner.runner_id,
        delivery
    );
    assert_eq!(n, 3);

    // Nothing is open any more: the pool can go without force.
    app.delete_json(
        &routes::runner_pool(tenant.workspace_id, pool),
        &tenant.token,
        &json!({}),
    )
    .ok_response()
    .await;
}

#[tokio::test]
async fn concurrent_reports_each_move_their_delivery_once_with_one_event() {
    let (app, tenant, pool, runner) = fixture().await.parts();
    let mut submitted = Vec::new();
    for _ in 0..24 {
        submitted.push(submit(&app, &tenant, pool).await);
    }

    // Sent together, so that (on Postgres) they share transactions.
    let responses = futures_util::future::join_all(
        submitted
            .iter()
            .map(|(_, delivery)| report(&app, &runner, delivery, json!({"status": "received"}))),
    )
    .await;
    for (response, (_, delivery)) in responses.into_iter().zip(&submitted) {
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["delivery"]["id"], delivery.to_string());
        assert_eq!(body["delivery"]["status"], "received");
    }
    for (command, delivery) in &submitted {
        assert_eq!(delivery_status(&app, *delivery).await, "received");
        assert_eq!(command_status_of(&app, *command).await, "dispatched");
        assert_eq!(
            events_about(&app, REPORTED, *delivery).await,
            (1, 1),
            "one numbered event for {delivery}"
        );
    }
}

#[tokio::test]
async fn the_same_report_sent_twice_at_once_applies_once() {
    let (app, tenant, pool, runner) = fixture().await.parts();
    let (command, delivery) = submit(&app, &tenant, pool).await;
    let mut others = Vec::new();
    for _ in 0..6 {
        others.push(submit(&app, &tenant, pool).await.1);
    }

    // The twin reports travel with others, so (on Postgres) they can land in one batch.
    let twins = futures_util::future::join_all(
        (0..2).map(|_| report(&app, &runner, delivery, json!({"status": "received"}))),
    );
    let rest = futures_util::future::join_all(
        others
            .iter()
            .map(|d| report(&app, &runner, d, json!({"status": "received"}))),
    );
    let (twins, rest) = tokio::join!(twins, rest);
    let mut statuses: Vec<u16> = twins.iter().map(|r| r.status().as_u16()).collect();
    statuses.sort();
    assert_eq!(statuses, [200, 409]);
    assert!(rest.iter().all(|r| r.status() == 200));
    assert_eq!(command_status_of(&app, command).await, "dispatched");
    assert_eq!(events_about(&app, REPORTED, delivery).await.0, 1);
}

#[tokio::test]
async fn transitions_the_state_machine_forbids_are_409() {
    let (app, tenant, pool, runner) = fixture().await.parts();
    let (command, delivery) = submit(&app, &tenant, pool).await;

    for status in ["succeeded", "running"] {
        let response = report(&app, &runner, delivery, json!({"status": status})).await;
        let err = assert_api_error(response, 409, "invalid_transition").await;
        assert_eq!(err["error"]["details"]["from"], "pending", "{err}");
        assert_eq!(err["error"]["details"]["to"], status, "{err}");
    }
    assert_eq!(delivery_status(&app, delivery).await, "pending");

    let response = report(&app, &runner, delivery, json!({"status": "received"})).await;
    assert_eq!(response.status(), 200);
    let response = report(&app, &runner, delivery, json!({"status": "received"})).await;
    assert_api_error(response, 409, "invalid_transition").await;

    // `failed` is allowed from any live state, with its detail and exit code.
    let response = report(
        &app,
        &runner,
        delivery,
        json!({"status": "failed", "detail": "image pull failed", "exitCode": 125}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let (detail, exit_code) = sql_one!(
        &mut app.db().await,
        (Option<String>, Option<i32>),
        "SELECT detail, exit_code FROM webhook_deliveries WHERE id = $1",
        delivery
    )
    .unwrap();
    assert_eq!(detail.as_deref(), Some("image pull failed"));
    assert_eq!(exit_code, Some(125));
    assert_eq!(command_status_of(&app, command).await, "failed");

    let response = report(&app, &runner, delivery, json!({"status": "running"})).await;
    assert_api_error(response, 409, "invalid_transition").await;
}

#[tokio::test]
async fn report_bodies_are_validated() {
    let (app, tenant, pool, runner) = fixture().await.parts();
    let (_, delivery) = submit(&app, &tenant, pool).await;
    for body in [
        json!({}),
        json!({"status": "pending"}),
        json!({"status": "done"}),
        json!({"status": "received", "detail": ""}),
        json!({"status": "received", "detail": "d".repeat(2001)}),
        json!({"status": "received", "exitCode": 4_294_967_296_i64}),
        json!({"status": "received", "extra": 1}),
    ] {
        let response = report(&app, &runner, delivery, body.clone()).await;
        let err = assert_api_error(response, 400, "validation_failed").await;
        assert!(err["error"]["details"]["field"].is_string(), "{body}");
    }
    assert_eq!(delivery_status(&app, delivery).await, "pending");
}

#[tokio::test]
async fn a_runner_reports_only_on_deliveries_of_its_own_pool() {
    let (app, tenant, pool, runner) = fixture().await.parts();
    let other_pool = create_pool(&app, tenant.workspace_id, "other-pool").await;
    let stranger = register(&app, other_pool, "stranger").await;
    let elsewhere = app.bootstrap().await;
    let foreign_pool = create_pool(&app, elsewhere.workspace_id, "foreign").await;
    let foreigner = register(&app, foreign_pool, "foreigner").await;
    let (_, delivery) = submit(&app, &tenant, pool).await;

    // Another pool's delivery (of this organisation or another) is a 404 indistinguishable
    // from a delivery that does not exist: same status, code, message and details.
    let unknown = report(
        &app,
        &stranger,
        Uuid::new_v4(),
        json!({"status": "received"}),
    );
    let unknown = error_shape(unknown.await).await;
    assert_eq!(unknown["status"], 404, "{unknown}");
    assert_eq!(unknown["code"], "not_found", "{unknown}");
    for intruder in [&stranger, &foreigner] {
        let response = report(&app, intruder, delivery, json!({"status": "received"})).await;
        assert_eq!(error_shape(response).await, unknown);
        let response = report(
            &app,
            intruder,
            Uuid::new_v4(),
            json!({"status": "received"}),
        );
        assert_eq!(error_shape(response.await).await, unknown);
    }
    assert_eq!(delivery_status(&app, delivery).await, "pending");

    for unknown_id in [Uuid::new_v4().to_string(), "not-a-uuid".to_owned()] {
        let response = report(&app, &runner, &unknown_id, json!({"status": "received"})).await;
        assert_eq!(error_shape(response).await, unknown);
    }

    let response = report(&app, &runner, delivery, json!({"status": "received"})).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn reports_on_a_command_cancelled_by_a_forced_pool_deletion_are_409() {
    let (app, tenant, pool, runner) = fixture().await.parts();
    let (command, delivery) = submit(&app, &tenant, pool).await;
    let response = report(&app, &runner, delivery, json!({"status": "received"})).await;
    assert_eq!(response.status(), 200);

    let body: Value = app
        .delete_ok(
            &routes::runner_pool(tenant.workspace_id, pool),
            &tenant.token,
            &json!({"reason": "runner lost", "force": true}),
        )
        .await;
    assert_eq!(body["cancelledCommands"], 1);
    assert_eq!(command_status_of(&app, command).await, "cancelled");

    for status in ["running", "failed"] {
        let response = report(&app, &runner, delivery, json!({"status": status})).await;
        assert_api_error(response, 409, "invalid_transition").await;
    }
    assert_eq!(delivery_status(&app, delivery).await, "received");
}

#[tokio::test]
async fn a_report_under_an_idempotency_key_replays_to_the_same_runner() {
    let (app, tenant, pool, runner) = fixture().await.parts();
    let (_, delivery) = submit(&app, &tenant, pool).await;
    let path = status_path(delivery);
    let bytes = json!({"status": "received"}).to_string().into_bytes();
    // Each attempt is signed afresh (a nonce is single use); the key makes it the same request.
    let keyed = || async {
        let signed = sign(&runner, &path, &bytes, now());
        let mut headers = signed.pairs().to_vec();
        headers.push(("idempotency-key", "report-key-0000000001"));
        send(&app, &path, &bytes, &headers).await
    };
    let first = keyed().await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let first_body = first.text().await.unwrap();
    let again = keyed().await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    assert_eq!(again.text().await.unwrap(), first_body);
    let n = sql_value!(
        app,
        i64,
        "SELECT count(*) FROM audit_events WHERE event_type = 'webhook_delivery.status_reported'"
    );
    assert_eq!(n, 1, "the replay did not run again");
}
