//! Runner signatures on delivery reports: every way one is refused (a missing, malformed or
//! foreign header, another method, path, body or time), nonces spent once across processes
//! and Redis restarts, key rotation, and the runner's own rate limits (docs/design.md,
//! "Runner signatures").

use control_plane::domain::{CorrelationId, SignedHeaders, sign_request};
use serde_json::json;
use uuid::Uuid;

use crate::support::runner::{
    RunnerKey, assert_refused, base64_of, command_status_of, delivery_status, fixture,
    fixture_with, nonce, now, register, report, send, send_to, sign, sign_with_nonce, status_path,
    submit,
};
use crate::support::{
    Call, ServerProcess, assert_api_error, delete_redis_keys, needs, rate, routes,
};

const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

#[tokio::test]
async fn every_signature_failure_is_401_invalid_signature_and_changes_nothing() {
    let (app, tenant, pool, runner) = fixture().await.parts();
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
    let (app, tenant, pool, runner) = fixture().await.parts();
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
    let (app, tenant, pool, runner) = fixture().await.parts();
    let (key_id, private_key) = app
        .services
        .add_runner_key(
            runner.runner_id,
            None,
            &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
        )
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
        .revoke_runner_key(
            runner.runner_id,
            runner.key_id,
            &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
        )
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
            .revoke_runner_key(
                runner.runner_id,
                runner.key_id,
                &control_plane::storage::WriteContext::admin(&CorrelationId::generate())
            )
            .await
            .is_err()
    );
}

/// Two server processes on one records store: Postgres records, and Redis to share.
#[tokio::test]
async fn redis_only_a_nonce_spent_through_one_process_is_refused_by_another() {
    needs!(Postgres, Redis);
    let (app, tenant, pool, runner) = fixture_with(|c| c.token_hash_key = Some(HASH_KEY.into()))
        .await
        .parts();
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
    let (app, tenant, pool, runner) = fixture().await.parts();
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
async fn a_runner_is_limited_per_runner_from_any_address_and_its_refusal_is_counted() {
    let (app, tenant, pool, runner) = fixture_with(|c| {
        c.runner_rate_limit = rate("2/m");
        c.runner_address_rate_limit = rate("2/m");
    })
    .await
    .parts();
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
    let (app, tenant, pool, runner) = fixture_with(|c| {
        c.rate_limit = rate("3/m");
        c.runner_address_rate_limit = rate("5/m");
    })
    .await
    .parts();
    let (_, delivery) = submit(&app, &tenant, pool).await;
    // Junk from the runner's own address spends that address's bearer budget to the end.
    let mut junk = Vec::new();
    for _ in 0..6 {
        let response = app
            .get(&routes::activity("x"), "cpat_junk")
            .response()
            .await;
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
    let (app, tenant, pool, runner) = fixture_with(|c| {
        c.rate_limit = rate("2/m");
        c.runner_address_rate_limit = rate("3/m");
    })
    .await
    .parts();
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
        .get(&routes::activity("x"), "cpat_junk")
        .response()
        .await;
    assert_eq!(anonymous.headers()["x-ratelimit-limit"], "2");
    assert_eq!(anonymous.headers()["x-ratelimit-remaining"], "1");
    assert_api_error(anonymous, 401, "unauthenticated").await;
    assert_eq!(delivery_status(&app, delivery).await, "pending");
}
