//! Several `control-plane` processes on one Postgres and one Redis behave as one server.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Call, ServerProcess, assert_api_error, issuance_body, needs, rate, routes, spawn_app_with,
};

const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

/// Two server processes on one records store: Postgres records, and Redis to share.
#[tokio::test]
async fn redis_only_two_processes_share_replays_limits_and_revocations() {
    needs!(Postgres, Redis);
    // The in-process app only prepares the database (and bootstraps with the same key).
    let app = spawn_app_with(|c| {
        c.token_hash_key = Some(HASH_KEY.into());
        c.rate_limit = rate("6/60s");
    })
    .await;
    let tenant = app.bootstrap().await;
    let a = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let b = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let client = reqwest::Client::new();

    // A key claimed through A is replayed through B.
    let body = issuance_body(&tenant);
    let post = |base: &str| {
        client
            .post(format!("{base}{}", routes::ISSUE_TOKEN))
            .bearer_auth(&tenant.token)
            .header("idempotency-key", "two-replicas-key-0001")
            .json(&body)
            .send()
    };
    let first = post(&a.address).await.unwrap();
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();
    let second = post(&b.address).await.unwrap();
    assert_eq!(second.headers()["idempotency-replayed"], "true");
    let second: Value = second.json().await.unwrap();
    assert_eq!(first["credential"]["token"], second["credential"]["token"]);

    // A limit spent through one is spent for both: 6 per minute, 2 used above.
    let path = routes::activity(tenant.workspace_id);
    let token = first["credential"]["token"].as_str().unwrap().to_owned();
    let get = |base: &str| {
        client
            .get(format!("{base}{path}"))
            .bearer_auth(&token)
            .send()
    };
    for base in [
        &a.address, &b.address, &a.address, &b.address, &a.address, &b.address,
    ] {
        assert_eq!(get(base).await.unwrap().status(), 200);
    }
    assert_api_error(get(&a.address).await.unwrap(), 429, "rate_limited").await;
    assert_api_error(get(&b.address).await.unwrap(), 429, "rate_limited").await;

    // A revocation through A is honoured by B at once.
    let id = first["credential"]["id"].as_str().unwrap();
    client
        .delete(format!(
            "{}{}",
            a.address,
            routes::revoke_token(tenant.workspace_id, id)
        ))
        .bearer_auth(&tenant.token)
        .json(&json!({"reason": "replica test"}))
        .ok_response()
        .await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_api_error(get(&b.address).await.unwrap(), 401, "unauthenticated").await;
}
