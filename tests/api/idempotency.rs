//! Exact replay of mutating requests under an Idempotency-Key.

use std::collections::HashSet;

use control_plane::domain::Scope;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{
    Call, Tenant, TestApp, assert_api_error, issuance_body, needs, redis_values, routes,
    spawn_app_with, sql_one, sql_value, tenant_app,
};

async fn issue_with_key(app: &TestApp, token: &str, key: &str, body: &Value) -> reqwest::Response {
    app.post_json(routes::ISSUE_TOKEN, token, body)
        .header("idempotency-key", key)
        .response()
        .await
}

async fn tokens_named(app: &TestApp, name: &str) -> i64 {
    sql_value!(
        app,
        i64,
        "SELECT count(*) FROM tokens WHERE name = $1",
        name
    )
}

#[tokio::test]
async fn thirty_two_concurrent_identical_requests_create_one_token() {
    let (app, tenant) = tenant_app().await;
    let body = issuance_body(&tenant);
    let key = "concurrent-key-0000000001";
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let request = app
            .post_json(routes::ISSUE_TOKEN, &tenant.token, &body)
            .header("idempotency-key", key);
        set.spawn(async move { request.response().await });
    }
    let responses = set.join_all().await;
    let mut secrets = HashSet::new();
    let (mut created, mut replayed, mut in_progress) = (0, 0, 0);
    for response in responses {
        match response.status().as_u16() {
            200 => {
                let replay = response.headers().get("idempotency-replayed").is_some();
                let v: Value = response.json().await.unwrap();
                secrets.insert(v["credential"]["token"].as_str().unwrap().to_owned());
                if replay { replayed += 1 } else { created += 1 }
            }
            409 => {
                assert_api_error(response, 409, "idempotency_in_progress").await;
                in_progress += 1;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(
        created, 1,
        "exactly one request ran ({replayed} replays, {in_progress} in progress)"
    );
    assert_eq!(created + replayed + in_progress, 32);
    assert_eq!(secrets.len(), 1, "every replay carries the same secret");
    assert_eq!(tokens_named(&app, body["name"].as_str().unwrap()).await, 1);
}

#[tokio::test]
async fn a_replay_returns_the_same_secret_without_running_again() {
    let (app, tenant) = tenant_app().await;
    let body = issuance_body(&tenant);
    let key = "replay-key-000000000001";
    let first = issue_with_key(&app, &tenant.token, key, &body).await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let first_body = first.text().await.unwrap();
    let events_before = sql_value!(app, i64, "SELECT count(*) FROM audit_events");

    // Same request with other spacing and key order: the same canonical body.
    let reordered: Value = serde_json::from_str(&body.to_string()).unwrap();
    let second = issue_with_key(&app, &tenant.token, key, &reordered).await;
    assert_eq!(second.status(), 200);
    assert_eq!(second.headers()["idempotency-replayed"], "true");
    assert!(second.headers().contains_key("x-correlation-id"));
    assert_eq!(second.text().await.unwrap(), first_body, "byte for byte");
    let events_after = sql_value!(app, i64, "SELECT count(*) FROM audit_events");
    assert_eq!(events_after, events_before, "no second audit event");
}

#[tokio::test]
async fn the_same_key_with_another_request_is_409_and_another_principal_gets_no_replay() {
    let (app, tenant) = tenant_app().await;
    let body = issuance_body(&tenant);
    let key = "shared-key-000000000001";
    assert_eq!(
        issue_with_key(&app, &tenant.token, key, &body)
            .await
            .status(),
        200
    );

    let mut other_body = body.clone();
    other_body["name"] = json!("something else");
    assert_api_error(
        issue_with_key(&app, &tenant.token, key, &other_body).await,
        409,
        "idempotency_key_reused",
    )
    .await;

    // Another token of the same user: its own key space. Running for real, the name is taken.
    let second = app
        .admin_token(&tenant, &Scope::ALL, &[tenant.workspace_id], &[])
        .await;
    let response = issue_with_key(&app, &second, key, &body).await;
    assert!(response.headers().get("idempotency-replayed").is_none());
    assert_api_error(response, 409, "conflict").await;
}

#[tokio::test]
async fn only_successes_are_stored_so_a_corrected_retry_runs() {
    let (app, tenant) = tenant_app().await;
    let key = "retry-key-0000000000001";
    let mut bad = issuance_body(&tenant);
    bad["expiresInDays"] = json!(0);
    assert_api_error(
        issue_with_key(&app, &tenant.token, key, &bad).await,
        400,
        "validation_failed",
    )
    .await;
    let good = issuance_body(&tenant);
    let response = issue_with_key(&app, &tenant.token, key, &good).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("idempotency-replayed").is_none());
}

#[tokio::test]
async fn invalid_keys_are_400() {
    let (app, tenant) = tenant_app().await;
    for key in [
        "a".repeat(15),
        "a".repeat(201),
        "has spaces in it ok".into(),
        "slash/is/not/allowed".into(),
    ] {
        let response = issue_with_key(&app, &tenant.token, &key, &issuance_body(&tenant)).await;
        let err = assert_api_error(response, 400, "validation_failed").await;
        assert_eq!(
            err["error"]["details"]["field"], "Idempotency-Key",
            "{key:?}"
        );
    }
    for key in ["a".repeat(16), "A.b_c:d-0123456789".into(), "z".repeat(200)] {
        assert_eq!(
            issue_with_key(&app, &tenant.token, &key, &issuance_body(&tenant))
                .await
                .status(),
            200,
            "{key}"
        );
    }
}

#[tokio::test]
async fn a_revocation_replays_instead_of_turning_into_a_404() {
    let (app, tenant) = tenant_app().await;
    let issued: Value = app.issued(&tenant).await;
    let path = routes::revoke_token(
        tenant.workspace_id,
        issued["credential"]["id"].as_str().unwrap(),
    );
    let send = || {
        app.request(Method::DELETE, &path)
            .bearer_auth(&tenant.token)
            .header("idempotency-key", "revoke-key-00000000001")
            .json(&json!({"reason": "rotated"}))
            .send()
    };
    assert_eq!(send().await.unwrap().status(), 200);
    let again = send().await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    assert_eq!(
        again.json::<Value>().await.unwrap(),
        json!({"revoked": true})
    );
}

#[tokio::test]
async fn redis_only_the_stored_record_does_not_reveal_the_secret() {
    crate::support::needs!(Redis);
    let redis = crate::support::test_redis_url().expect("needs! checked it");
    let (app, tenant) = tenant_app().await;
    let response = issue_with_key(
        &app,
        &tenant.token,
        "secret-key-00000000001",
        &issuance_body(&tenant),
    )
    .await;
    let secret = response.json::<Value>().await.unwrap()["credential"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let values = redis_values(&redis, &app.config.redis_prefix).await;
    let records: Vec<_> = values
        .iter()
        .filter(|(k, _)| k.contains(":idem:"))
        .collect();
    assert_eq!(records.len(), 1, "one idempotency record");
    let public = &secret[..secret.len() - 10];
    for (_, value) in &values {
        assert!(
            !value.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "secret readable in Redis"
        );
        assert!(!value.windows(public.len()).any(|w| w == public.as_bytes()));
    }
}

#[tokio::test]
async fn over_its_stored_bytes_quota_a_user_is_refused_before_anything_runs() {
    // One byte: the first stored response crosses it (and is still stored), so the quota is
    // spent from the second keyed request on.
    let app = spawn_app_with(|c| c.idempotency_quota_bytes = 1).await;
    let tenant = app.bootstrap().await;
    let first_body = issuance_body(&tenant);
    let first = issue_with_key(&app, &tenant.token, "quota-key-0000000001", &first_body).await;
    assert_eq!(first.status(), 200);
    let first_text = first.text().await.unwrap();

    let body = issuance_body(&tenant);
    let refused = issue_with_key(&app, &tenant.token, "quota-key-0000000002", &body).await;
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=24 * 3600).contains(&retry), "{retry}");
    let err = assert_api_error(refused, 429, "idempotency_quota_exceeded").await;
    assert_eq!(err["error"]["details"]["quotaBytes"], 1);
    assert_eq!(
        tokens_named(&app, body["name"].as_str().unwrap()).await,
        0,
        "nothing ran"
    );

    // The stored response is still replayed.
    let replay = issue_with_key(&app, &tenant.token, "quota-key-0000000001", &first_body).await;
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(replay.text().await.unwrap(), first_text);
    // Without a key nothing is stored, so nothing is refused.
    assert_eq!(app.issue(&tenant.token, &body).await.status(), 200);
    // Another token of the same user shares the quota.
    let other = app
        .scoped_token(&tenant, &[Scope::TokensIssue, Scope::ActivityRead])
        .await;
    let refused = issue_with_key(
        &app,
        &other,
        "quota-key-0000000003",
        &issuance_body(&tenant),
    )
    .await;
    assert_api_error(refused, 429, "idempotency_quota_exceeded").await;
    // Another user has a quota of its own.
    let user = app
        .services
        .create_user(
            tenant.organisation_id,
            &format!("quota-{}@example.com", uuid::Uuid::new_v4().simple()),
            &control_plane::domain::CorrelationId::generate(),
        )
        .await
        .unwrap();
    let colleague = Tenant {
        user_id: user.id,
        ..tenant.clone()
    };
    let token = app
        .admin_token(
            &colleague,
            &[Scope::TokensIssue, Scope::ActivityRead],
            &[tenant.workspace_id],
            &[],
        )
        .await;
    let served = issue_with_key(
        &app,
        &token,
        "quota-key-0000000004",
        &issuance_body(&tenant),
    )
    .await;
    assert_eq!(served.status(), 200);
}

#[tokio::test]
async fn keyed_requests_within_the_quota_are_stored_as_before() {
    let app = spawn_app_with(|c| c.idempotency_quota_bytes = 1024 * 1024).await;
    let tenant = app.bootstrap().await;
    for i in 0..3 {
        let body = issuance_body(&tenant);
        let key = format!("within-quota-key-{i:04}");
        let first = issue_with_key(&app, &tenant.token, &key, &body).await;
        assert_eq!(first.status(), 200);
        let replay = issue_with_key(&app, &tenant.token, &key, &body).await;
        assert_eq!(replay.headers()["idempotency-replayed"], "true");
    }
}

/// A keyed handler that runs past two thirds of its lease is stopped (503, with the wait), and
/// its key answers 409 until the lease ends: a retry never runs beside an attempt whose commit
/// may still land. Then the retry runs, once.
#[tokio::test]
async fn postgres_only_a_keyed_handler_past_its_deadline_is_stopped_and_its_key_held() {
    needs!(Postgres);
    let app = spawn_app_with(|c| c.idempotency_lease_ms = 1500).await;
    let tenant = app.bootstrap().await;
    let cid = control_plane::domain::CorrelationId::generate();
    let pool = app
        .services
        .create_pool(
            tenant.workspace_id,
            "slow",
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await
        .unwrap()
        .id;
    // Submissions take the pool's row FOR SHARE: holding it FOR UPDATE stalls the handler.
    let crate::support::TestDb::Pg(mut blocker) = app.db().await else {
        unreachable!("a Postgres run")
    };
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("SELECT id FROM runner_pools WHERE id = $1 FOR UPDATE")
        .bind(pool)
        .execute(&mut blocker)
        .await
        .unwrap();

    let path = routes::runner_commands(tenant.workspace_id);
    let body = json!({ "poolId": pool, "command": "slow-once" });
    let send = || {
        app.post_json(&path, &tenant.token, &body)
            .header("idempotency-key", "slow-handler-key-0001")
            .send()
    };
    // Bounded so a handler that is not stopped fails the test instead of hanging it.
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), send())
        .await
        .expect("stopped at its deadline, not left waiting on the lock")
        .unwrap();
    assert_eq!(stopped.headers()["retry-after"], "1");
    assert_api_error(stopped, 503, "unavailable").await;
    let held = send().await.unwrap();
    assert!(held.headers().contains_key("retry-after"));
    assert_api_error(held, 409, "idempotency_in_progress").await;

    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    let mut answered = None;
    for _ in 0..50 {
        let response = send().await.unwrap();
        if response.status() == 200 {
            answered = Some(response);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        answered.is_some(),
        "the key is free again once the lease ends"
    );
    let (n,) = sql_one!(
        &mut app.db().await,
        (i64,),
        "SELECT count(*) FROM runner_commands WHERE command = $1",
        "slow-once"
    )
    .unwrap();
    assert_eq!(n, 1, "the stopped attempt left nothing; the retry ran once");
}
