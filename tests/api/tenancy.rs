//! Issue 26's tenant defences: a keyed replay re-checks authorization.

use control_plane::domain::{CorrelationId, RevocationReason, Scope};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{TestApp, assert_api_error, create_pool, spawn_app};

/// The token id behind a secret, as authentication resolves it.
async fn token_id(app: &TestApp, secret: &str) -> Uuid {
    app.services.authenticate(secret).await.unwrap().token_id
}

#[tokio::test]
async fn a_keyed_replay_is_refused_once_the_grant_it_needed_is_revoked() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let parent = app
        .admin_token(
            &tenant,
            &[Scope::TokensIssue, Scope::ActivityRead],
            &[tenant.workspace_id, second],
            &[],
        )
        .await;
    let child_of = |workspace: Uuid| {
        json!({
            "name": format!("child-{}", Uuid::new_v4().simple()),
            "scopes": ["activity:read"],
            "organisationId": tenant.organisation_id,
            "workspaceIds": [workspace],
        })
    };
    let issue = |body: &Value, key: &str| {
        app.post_json("/v1/personal-access-tokens", &parent, body)
            .header("idempotency-key", key)
            .send()
    };
    let on_second = child_of(second);
    let on_main = child_of(tenant.workspace_id);
    let first = issue(&on_second, "replay-authz-second-0001").await.unwrap();
    assert_eq!(first.status(), 200);
    let secret = first.json::<Value>().await.unwrap()["credential"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let kept = issue(&on_main, "replay-authz-main-000001").await.unwrap();
    assert_eq!(kept.status(), 200);
    let kept_secret = kept.json::<Value>().await.unwrap()["credential"]["token"].clone();

    // The parent loses the second workspace; it keeps the first.
    app.services
        .revoke_token_access_as_admin(
            Some(second),
            token_id(&app, &parent).await,
            RevocationReason::parse("rotated").unwrap(),
            false,
            &CorrelationId::generate(),
        )
        .await
        .unwrap();

    // A fresh request is refused, and so is the keyed repeat: the same 403, not the secret.
    let fresh = app.issue(&parent, &child_of(second)).await;
    let fresh = assert_api_error(fresh, 403, "forbidden").await;
    let replay = issue(&on_second, "replay-authz-second-0001").await.unwrap();
    assert!(replay.headers().get("idempotency-replayed").is_none());
    let refused = assert_api_error(replay, 403, "forbidden").await;
    assert_eq!(refused["error"]["details"], fresh["error"]["details"]);
    assert!(!refused.to_string().contains(&secret), "{refused}");

    // What the caller may still do is still replayed, with the same secret.
    let replay = issue(&on_main, "replay-authz-main-000001").await.unwrap();
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(
        replay.json::<Value>().await.unwrap()["credential"]["token"],
        kept_secret
    );
}

#[tokio::test]
async fn a_keyed_replay_is_refused_when_the_policy_now_denies_it() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let pool = create_pool(&app, tenant.workspace_id, "replayed").await;
    let path = format!("/v1/workspaces/{}/runner-commands", tenant.workspace_id);
    let body = json!({"poolId": pool, "command": "echo"});
    let submit = || {
        app.post_json(&path, &tenant.token, &body)
            .header("idempotency-key", "replay-authz-policy-0001")
            .send()
    };
    assert_eq!(submit().await.unwrap().status(), 200);
    crate::helpers::activate_deny_all(&app.services).await;
    // The activation reaches the server through its change feed: wait until a fresh request
    // is refused.
    let activity = format!("/v1/workspaces/{}/activity", tenant.workspace_id);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while app.get(&activity, &tenant.token).send().await.unwrap().status() != 403 {
        assert!(std::time::Instant::now() < deadline, "the policy never applied");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let replay = submit().await.unwrap();
    assert!(replay.headers().get("idempotency-replayed").is_none());
    assert_eq!(replay.status(), 403);
}
