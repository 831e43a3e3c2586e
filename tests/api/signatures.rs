//! Signed delivery reports: the delivery state machine, and every way a runner signature is
//! refused (docs/design.md, "Runner signatures").

use control_plane::domain::{CorrelationId, SignedHeaders, sign_request};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::runner::{
    Fixture, RunnerKey, assert_refused, base64_of, command_status_of, delivery_status, fixture,
    fixture_on, nonce, now, register, report, send, send_to, sign, sign_with_nonce, status_path,
    submit,
};
use crate::support::{
    ServerProcess, assert_api_error, create_pool, delete_redis_keys, error_shape, events_about,
    needs, spawn_app_with, sql_one,
};

const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
const REPORTED: &str = "webhook_delivery.status_reported";

#[tokio::test]
async fn a_delivery_moves_received_running_succeeded_and_its_command_follows() {
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
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
    let (n,) = sql_one!(
        &mut app.db().await,
        (i64,),
        "SELECT count(*) FROM audit_events
         WHERE event_type = 'webhook_delivery.status_reported'
           AND actor_kind = 'runner' AND actor_id = $1 AND target_id = $2",
        runner.runner_id,
        delivery
    )
    .unwrap();
    assert_eq!(n, 3);

    // Nothing is open any more: the pool can go without force.
    let response = app
        .delete_json(
            &format!("/v1/workspaces/{}/runner-pools/{pool}", tenant.workspace_id),
            &tenant.token,
            &json!({}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn concurrent_reports_each_move_their_delivery_once_with_one_event() {
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
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
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
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
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
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
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
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
async fn every_signature_failure_is_401_invalid_signature_and_changes_nothing() {
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
    let other = register(&app, pool, "runner-b").await;
    let (_, delivery) = submit(&app, &tenant, pool).await;
    let path = status_path(delivery);
    let body = json!({"status": "received"}).to_string().into_bytes();
    let good = || sign(&runner, &path, &body, now());

    // Each header missing, or given twice.
    let signed = good();
    for (missing, _) in signed.pairs() {
        let pairs: Vec<(&str, &str)> = signed
            .pairs()
            .into_iter()
            .filter(|(name, _)| *name != missing)
            .collect();
        assert_refused(send(&app, &path, &body, &pairs).await).await;
    }
    let signed = good();
    let mut pairs = signed.pairs().to_vec();
    pairs.push(("x-sandbox-nonce", signed.nonce.as_str()));
    assert_refused(send(&app, &path, &body, &pairs).await).await;

    // Malformed headers.
    let mut malformed: Vec<SignedHeaders> = Vec::new();
    for signature in [
        "*".repeat(88),
        "not base64".to_owned(),
        base64_of(&[7; 63]),
        // Well-formed, but not a signature of this request.
        base64_of(&[0; 64]),
    ] {
        let mut signed = good();
        signed.signature = signature;
        malformed.push(signed);
    }
    for (field, value) in [
        ("runner", "not-a-uuid"),
        ("key", "not-a-uuid"),
        ("timestamp", "soon"),
        ("timestamp", "-5"),
        ("timestamp", ""),
        ("nonce", "short"),
        ("nonce", "spaces are not allowed"),
    ] {
        let mut signed = good();
        let slot = match field {
            "runner" => &mut signed.runner_id,
            "key" => &mut signed.key_id,
            "timestamp" => &mut signed.timestamp,
            _ => &mut signed.nonce,
        };
        *slot = value.to_owned();
        malformed.push(signed);
    }
    for signed in &malformed {
        assert_refused(send(&app, &path, &body, &signed.pairs()).await).await;
    }

    let ts = now();
    let refused = [
        // An unknown key id.
        sign_request(
            &runner.private_key,
            runner.runner_id,
            Uuid::new_v4(),
            "POST",
            &path,
            &body,
            ts,
            &nonce(),
        ),
        // Runner B's key id (and private key) under runner A's id.
        sign_request(
            &other.private_key,
            runner.runner_id,
            other.key_id,
            "POST",
            &path,
            &body,
            ts,
            &nonce(),
        ),
        // Runner B's identity, signed with runner A's private key.
        sign_request(
            &runner.private_key,
            other.runner_id,
            other.key_id,
            "POST",
            &path,
            &body,
            ts,
            &nonce(),
        ),
        // Signed for another method.
        sign_request(
            &runner.private_key,
            runner.runner_id,
            runner.key_id,
            "PUT",
            &path,
            &body,
            ts,
            &nonce(),
        ),
        // Signed for another delivery's path.
        sign(&runner, &status_path(Uuid::new_v4()), &body, ts),
        // Signed for another body.
        sign(&runner, &path, br#"{"status":"failed"}"#, ts),
        // The same JSON, spaced differently: the raw bytes are what is signed.
        sign(&runner, &path, br#"{"status": "received"}"#, ts),
    ];
    for signed in &refused {
        assert_refused(send(&app, &path, &body, &signed.pairs()).await).await;
    }
    // Too old, and too far ahead (with a few seconds of margin for the request itself).
    for offset in [-301, 305] {
        let signed = sign(&runner, &path, &body, now() + offset);
        assert_refused(send(&app, &path, &body, &signed.pairs()).await).await;
    }

    // None of that moved the delivery; a timestamp within the tolerance is accepted.
    assert_eq!(delivery_status(&app, delivery).await, "pending");
    let signed = sign(&runner, &path, &body, now() - 250);
    let response = send(&app, &path, &body, &signed.pairs()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(delivery_status(&app, delivery).await, "received");
}

#[tokio::test]
async fn a_replayed_nonce_is_refused_but_one_of_a_refused_request_is_not_spent() {
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
    let (_, delivery) = submit(&app, &tenant, pool).await;
    let path = status_path(delivery);
    let body = json!({"status": "received"}).to_string().into_bytes();

    // A request whose signature fails does not spend its nonce.
    let shared = nonce();
    let mut forged = sign_with_nonce(&runner, &path, &body, &shared);
    forged.signature = base64_of(&[1; 64]);
    assert_refused(send(&app, &path, &body, &forged.pairs()).await).await;
    let signed = sign_with_nonce(&runner, &path, &body, &shared);
    assert_eq!(
        send(&app, &path, &body, &signed.pairs()).await.status(),
        200
    );

    // The exact same request again: refused, and the delivery does not move.
    let replay = send(&app, &path, &body, &signed.pairs()).await;
    let err = assert_api_error(replay, 401, "invalid_signature").await;
    assert!(
        err["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nonce")),
        "{err}"
    );
    // The nonce is spent for this runner whatever the request.
    let running = json!({"status": "running"}).to_string().into_bytes();
    let reused = sign_with_nonce(&runner, &path, &running, &shared);
    assert_refused(send(&app, &path, &running, &reused.pairs()).await).await;
    assert_eq!(delivery_status(&app, delivery).await, "received");

    let response = report(&app, &runner, delivery, json!({"status": "running"})).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn rotation_keeps_both_keys_working_until_one_is_revoked() {
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
    let (key_id, private_key) = app
        .services
        .add_runner_key(runner.runner_id, None, &CorrelationId::generate())
        .await
        .expect("second key");
    let rotated = RunnerKey {
        runner_id: runner.runner_id,
        key_id,
        private_key: private_key.expect("generated key"),
    };
    assert_ne!(rotated.key_id, runner.key_id);
    let (_, delivery) = submit(&app, &tenant, pool).await;

    let response = report(&app, &runner, delivery, json!({"status": "received"})).await;
    assert_eq!(response.status(), 200);
    let response = report(&app, &rotated, delivery, json!({"status": "running"})).await;
    assert_eq!(response.status(), 200);

    app.services
        .revoke_runner_key(runner.runner_id, runner.key_id, &CorrelationId::generate())
        .await
        .expect("revoke the first key");
    let response = report(&app, &runner, delivery, json!({"status": "succeeded"})).await;
    assert_refused(response).await;
    assert_eq!(delivery_status(&app, delivery).await, "running");
    let response = report(&app, &rotated, delivery, json!({"status": "succeeded"})).await;
    assert_eq!(response.status(), 200);

    // A key revoked twice is not there any more.
    assert!(
        app.services
            .revoke_runner_key(runner.runner_id, runner.key_id, &CorrelationId::generate())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_runner_reports_only_on_deliveries_of_its_own_pool() {
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
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
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
    let (command, delivery) = submit(&app, &tenant, pool).await;
    let response = report(&app, &runner, delivery, json!({"status": "received"})).await;
    assert_eq!(response.status(), 200);

    let response = app
        .delete_json(
            &format!("/v1/workspaces/{}/runner-pools/{pool}", tenant.workspace_id),
            &tenant.token,
            &json!({"reason": "runner lost", "force": true}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["cancelledCommands"], 1);
    assert_eq!(command_status_of(&app, command).await, "cancelled");

    for status in ["running", "failed"] {
        let response = report(&app, &runner, delivery, json!({"status": status})).await;
        assert_api_error(response, 409, "invalid_transition").await;
    }
    assert_eq!(delivery_status(&app, delivery).await, "received");
}

/// Two server processes on one records store: Postgres records, and Redis to share.
#[tokio::test]
async fn redis_only_a_nonce_spent_through_one_process_is_refused_by_another() {
    needs!(Postgres, Redis);
    let app = spawn_app_with(|c| c.token_hash_key = Some(HASH_KEY.into())).await;
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture_on(app).await;
    let (_, delivery) = submit(&app, &tenant, pool).await;
    let first = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let second = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let client = reqwest::Client::new();
    let path = status_path(delivery);

    let body = json!({"status": "received"}).to_string().into_bytes();
    let signed = sign(&runner, &path, &body, now());
    let response = send_to(
        &client,
        &format!("{}{path}", first.address),
        &body,
        &signed.pairs(),
    )
    .await;
    assert_eq!(response.status(), 200);
    for process in [&second, &first] {
        let replay = send_to(
            &client,
            &format!("{}{path}", process.address),
            &body,
            &signed.pairs(),
        )
        .await;
        assert_refused(replay).await;
    }

    // The second process is healthy: a fresh nonce moves the delivery on from `received`.
    let body = json!({"status": "running"}).to_string().into_bytes();
    let signed = sign(&runner, &path, &body, now());
    let response = send_to(
        &client,
        &format!("{}{path}", second.address),
        &body,
        &signed.pairs(),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(delivery_status(&app, delivery).await, "running");
}

/// Redis in the compose file keeps nothing across a restart, so the nonces of the last 300 s
/// can be forgotten. What then protects a captured report is the delivery's state machine: an
/// accepted report's transition is never allowed twice, so its replay is a 409 that changes
/// nothing.
#[tokio::test]
async fn redis_only_a_report_replayed_after_redis_forgot_its_nonces_changes_nothing() {
    needs!(Postgres, Redis);
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
    let (command, delivery) = submit(&app, &tenant, pool).await;
    let path = status_path(delivery);
    let mut captured = Vec::new();
    for status in ["received", "running"] {
        let body = json!({ "status": status }).to_string().into_bytes();
        let signed = sign(&runner, &path, &body, now());
        assert_eq!(
            send(&app, &path, &body, &signed.pairs()).await.status(),
            200,
            "{status}"
        );
        captured.push((body, signed));
    }
    let redis = app.config.redis_url.clone().expect("a Redis run");
    delete_redis_keys(&redis, &app.config.redis_prefix).await;

    for (body, signed) in &captured {
        let replay = send(&app, &path, body, &signed.pairs()).await;
        assert_api_error(replay, 409, "invalid_transition").await;
    }
    assert_eq!(delivery_status(&app, delivery).await, "running");
    assert_eq!(command_status_of(&app, command).await, "running");
}

#[tokio::test]
async fn a_report_under_an_idempotency_key_replays_to_the_same_runner() {
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture().await;
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
    let (n,) = sql_one!(
        &mut app.db().await,
        (i64,),
        "SELECT count(*) FROM audit_events WHERE event_type = 'webhook_delivery.status_reported'"
    )
    .unwrap();
    assert_eq!(n, 1, "the replay did not run again");
}

#[tokio::test]
async fn a_runner_is_limited_per_runner_from_any_address_and_its_refusal_is_counted() {
    use control_plane::config::RateOption;
    use control_plane::storage::Rate;

    let app = spawn_app_with(|c| {
        c.runner_rate_limit = RateOption(Some(Rate::parse("2/m").unwrap()));
        c.runner_address_rate_limit = RateOption(Some(Rate::parse("2/m").unwrap()));
    })
    .await;
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture_on(app).await;
    let (_, delivery) = submit(&app, &tenant, pool).await;
    let path = status_path(delivery);
    // Each report from its own loopback address: the address budgets (of the same size) never
    // run out, so the third report meets the runner's own.
    let mut statuses = Vec::new();
    let mut last = None;
    for (i, status) in ["received", "running", "succeeded"].into_iter().enumerate() {
        let address = std::net::Ipv4Addr::new(127, 0, 0, 2 + i as u8);
        let client = reqwest::Client::builder()
            .local_address(std::net::IpAddr::V4(address))
            .build()
            .unwrap();
        let bytes = json!({ "status": status }).to_string().into_bytes();
        let signed = sign(&runner, &path, &bytes, now());
        let response = send_to(&client, &app.url(&path), &bytes, &signed.pairs()).await;
        statuses.push(response.status().as_u16());
        last = Some(response);
    }
    assert_eq!(statuses, [200, 200, 429]);
    let limited = last.unwrap();
    assert_eq!(limited.headers()["x-ratelimit-limit"], "2");
    assert_api_error(limited, 429, "rate_limited").await;
    assert_eq!(delivery_status(&app, delivery).await, "running");

    let metrics = app.metrics().await;
    assert!(
        metrics.contains(r#"rate_limited_total{class="write"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_flood_of_junk_bearer_tokens_does_not_starve_a_runner_behind_the_same_address() {
    use control_plane::config::RateOption;
    use control_plane::storage::Rate;

    let app = spawn_app_with(|c| {
        c.rate_limit = RateOption(Some(Rate::parse("3/m").unwrap()));
        c.runner_address_rate_limit = RateOption(Some(Rate::parse("5/m").unwrap()));
    })
    .await;
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture_on(app).await;
    let (_, delivery) = submit(&app, &tenant, pool).await;
    // Junk from the runner's own address spends that address's bearer budget to the end.
    let mut junk = Vec::new();
    for _ in 0..6 {
        let response = app
            .get("/v1/workspaces/x/activity", "cpat_junk")
            .send()
            .await
            .unwrap();
        junk.push(response.status().as_u16());
    }
    assert_eq!(junk, [401, 401, 401, 429, 429, 429]);
    // A junk `Authorization` on the report itself is not even looked at.
    let path = status_path(delivery);
    let bytes = json!({ "status": "received" }).to_string().into_bytes();
    let signed = sign(&runner, &path, &bytes, now());
    let mut headers = signed.pairs().to_vec();
    headers.push(("authorization", "Bearer cpat_junk"));
    let served = send(&app, &path, &bytes, &headers).await;
    assert_eq!(served.status(), 200, "{:?}", served.text().await);
    let served = report(&app, &runner, delivery, json!({ "status": "running" })).await;
    assert_eq!(served.status(), 200);
    assert_eq!(
        served.headers()["x-ratelimit-limit"],
        "5",
        "the runner budgets"
    );
    assert_eq!(delivery_status(&app, delivery).await, "running");
}

#[tokio::test]
async fn failed_signatures_spend_the_runner_address_budget_not_the_bearer_one() {
    use control_plane::config::RateOption;
    use control_plane::storage::Rate;

    let app = spawn_app_with(|c| {
        c.rate_limit = RateOption(Some(Rate::parse("2/m").unwrap()));
        c.runner_address_rate_limit = RateOption(Some(Rate::parse("3/m").unwrap()));
    })
    .await;
    let Fixture {
        app,
        tenant,
        pool,
        runner,
    } = fixture_on(app).await;
    let (_, delivery) = submit(&app, &tenant, pool).await;
    let path = status_path(delivery);
    let bytes = json!({ "status": "received" }).to_string().into_bytes();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        // Signed over another body: the signature does not verify.
        let signed = sign(&runner, &path, b"{}", now());
        let response = send(&app, &path, &bytes, &signed.pairs()).await;
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            assert_eq!(response.headers()["x-ratelimit-limit"], "3");
            assert_api_error(response, 429, "rate_limited").await;
        }
    }
    assert_eq!(statuses, [401, 401, 401, 429]);
    // The address's bearer budget (2/m) is untouched: both requests are answered on their own
    // merits, the first allowed, the second refused by the budget itself.
    let anonymous = app
        .get("/v1/workspaces/x/activity", "cpat_junk")
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.headers()["x-ratelimit-limit"], "2");
    assert_eq!(anonymous.headers()["x-ratelimit-remaining"], "1");
    assert_api_error(anonymous, 401, "unauthenticated").await;
    assert_eq!(delivery_status(&app, delivery).await, "pending");
}
