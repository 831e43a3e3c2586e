//! Offboarding and rotation (`cpctl users disable|enable`, `cpctl tokens rotate`): a disabled
//! user's tokens answer 401 at once and its audit streams end; enabling brings back the tokens
//! still otherwise live; a rotated token's old secret works for the grace and not a moment after,
//! on every replica.

use std::sync::Arc;
use std::time::Duration;

use control_plane::domain::{CorrelationId, RevocationReason, Scope, Span};
use control_plane::service::Services;
use serde_json::json;
use uuid::Uuid;

use crate::support::sse::{Sse, logged_events, reader, stream_path};
use crate::support::{
    Call, ServerProcess, Tenant, TestApp, needs, routes, spawn_app_with, sql_all, sql_exec,
    tenant_app,
};

/// What `cpctl` opens: its own `Services` (its own pool) on the app's records.
async fn cpctl(app: &TestApp) -> Arc<Services> {
    control_plane::startup::open_services(&app.config)
        .await
        .expect("cpctl opens the records store")
}

/// A token of `user` with `activity:read` and `audit:read` on its workspace: (secret, id).
async fn token_of(app: &TestApp, user: &Tenant) -> (String, Uuid) {
    let input = control_plane::service::IssueTokenInput::new(
        control_plane::domain::TokenName::parse(&format!("o-{}", Uuid::new_v4().simple())).unwrap(),
        [Scope::ActivityRead, Scope::AuditRead]
            .into_iter()
            .collect(),
        user.organisation_id,
        vec![user.workspace_id],
        vec![],
        control_plane::domain::ExpiresInDays::default(),
    )
    .unwrap();
    let issued = app
        .services
        .issue_token_for_user(user.user_id, input, &CorrelationId::generate())
        .await
        .unwrap();
    (issued.secret.expose().to_owned(), issued.record.id)
}

fn activity(tenant: &Tenant) -> String {
    routes::activity(tenant.workspace_id)
}

async fn status(app: &TestApp, tenant: &Tenant, token: &str) -> u16 {
    app.get(&activity(tenant), token).status_code().await
}

fn span(raw: &str) -> Span {
    raw.parse().expect("a span")
}

#[tokio::test]
async fn a_disabled_users_tokens_and_their_descendants_get_401_until_it_is_enabled() {
    let (app, tenant) = tenant_app().await;
    let member = app.member_of(&tenant).await;
    let scopes = [Scope::ActivityRead, Scope::TokensIssue];
    let token = app
        .admin_token(&member, &scopes, &[member.workspace_id], &[])
        .await;
    let revoked = app
        .admin_token(&member, &scopes, &[member.workspace_id], &[])
        .await;
    // A token issued by the member's token: the same user, so the same fate.
    let mut body = crate::support::issuance_body(&member);
    body["scopes"] = json!(["activity:read"]);
    let child: serde_json::Value = app.issue(&token, &body).await.ok().await;
    let child = child["credential"]["token"].as_str().unwrap().to_owned();
    for t in [&token, &revoked, &child] {
        assert_eq!(status(&app, &member, t).await, 200);
    }

    let cpctl = cpctl(&app).await;
    let cid = CorrelationId::generate();
    let reason = RevocationReason::parse("left the company").unwrap();
    let disabled = cpctl
        .disable_user(member.user_id, Some(reason.clone()), &cid)
        .await
        .unwrap();
    assert!(disabled.changed);
    let since = disabled.user.disabled.clone().expect("disabled");
    assert_eq!(since.reason.as_deref(), Some("left the company"));
    for t in [&token, &revoked, &child] {
        app.get(&activity(&member), t)
            .expect(401, "unauthenticated")
            .await;
    }
    // Other users of the organisation are untouched.
    assert_eq!(status(&app, &tenant, &tenant.token).await, 200);

    // A repeat changes nothing: no second event, the first time and reason kept.
    let again = cpctl
        .disable_user(member.user_id, None, &cid)
        .await
        .unwrap();
    assert!(!again.changed);
    assert_eq!(again.user.disabled, Some(since));

    // Revoked while disabled: enabling does not bring it back.
    let revoked_id = cpctl
        .list_tokens(&control_plane::storage::TokenFilter {
            user_id: Some(member.user_id),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .find(|t| revoked.contains(&t.public_id))
        .unwrap()
        .id;
    cpctl
        .revoke_token_access_as_admin(None, revoked_id, reason, false, &cid)
        .await
        .unwrap();

    let enabled = cpctl.enable_user(member.user_id, &cid).await.unwrap();
    assert!(enabled.changed);
    assert_eq!(enabled.user.disabled, None);
    assert!(
        !cpctl
            .enable_user(member.user_id, &cid)
            .await
            .unwrap()
            .changed
    );
    assert_eq!(status(&app, &member, &token).await, 200);
    assert_eq!(status(&app, &member, &child).await, 200);
    app.get(&activity(&member), &revoked)
        .expect(401, "unauthenticated")
        .await;

    // One event each way (the repeats wrote none), naming no secret.
    let events = sql_all!(
        &mut app.db().await,
        (String,),
        "SELECT event_type FROM audit_events WHERE target_id = $1 ORDER BY occurred_at",
        member.user_id
    )
    .unwrap();
    let types: Vec<&str> = events.iter().map(|(t,)| t.as_str()).collect();
    assert_eq!(types, ["user.created", "user.disabled", "user.enabled"]);
}

#[tokio::test]
async fn disabling_a_user_ends_its_open_audit_stream_within_two_seconds() {
    let (app, tenant) = tenant_app().await;
    let member = app.member_of(&tenant).await;
    let ws = member.workspace_id;
    let (token, _) = reader(&app, &member, &[ws]).await;
    let mut stream = Sse::open(&app, &token, ws, "", None).await;
    stream.expect_preamble().await;

    cpctl(&app)
        .await
        .disable_user(member.user_id, None, &CorrelationId::generate())
        .await
        .unwrap();
    stream.until_end().await.assert_prompt("access revoked");
    app.get(&stream_path(ws), &token)
        .expect(401, "unauthenticated")
        .await;
}

#[tokio::test]
async fn a_rotated_tokens_old_secret_works_during_the_grace_and_fails_after_it() {
    let (app, tenant) = tenant_app().await;
    let member = app.member_of(&tenant).await;
    let (first, id) = token_of(&app, &member).await;
    let cpctl = cpctl(&app).await;
    let cid = CorrelationId::generate();

    let rotated = cpctl.rotate_token(id, span("1h"), &cid).await.unwrap();
    let second = rotated.credential.secret.expose().to_owned();
    assert_eq!(rotated.credential.record.id, id, "the same token");
    assert_ne!(second, first);
    assert_eq!(status(&app, &member, &first).await, 200);
    assert_eq!(status(&app, &member, &second).await, 200);

    // A second rotation ends the first one's grace: `first` stops, `second` has 2 s.
    let again = cpctl.rotate_token(id, span("2s"), &cid).await.unwrap();
    let third = again.credential.secret.expose().to_owned();
    app.get(&activity(&member), &first)
        .expect(401, "unauthenticated")
        .await;
    assert_eq!(status(&app, &member, &second).await, 200);
    assert_eq!(status(&app, &member, &third).await, 200);

    // The server reads the real clock: let the grace run out.
    let left = again.previous_valid_until - chrono::Utc::now();
    tokio::time::sleep(left.to_std().unwrap_or_default() + Duration::from_millis(100)).await;
    app.get(&activity(&member), &second)
        .expect(401, "unauthenticated")
        .await;
    assert_eq!(status(&app, &member, &third).await, 200);

    // Each rotation is audited in the token's workspace, with no secret in it.
    let events = sql_all!(
        &mut app.db().await,
        (String, String),
        "SELECT event_type, CAST(data AS TEXT) FROM audit_events
         WHERE target_id = $1 AND event_type = 'token.rotated' AND workspace_id = $2",
        id,
        member.workspace_id
    )
    .unwrap();
    assert_eq!(events.len(), 2);
    for (_, data) in &events {
        for secret in [&first, &second, &third] {
            assert!(!data.contains(secret.as_str()), "{data}");
        }
        assert!(data.contains("previousValidUntil"), "{data}");
    }
}

#[tokio::test]
async fn a_rotation_without_grace_stops_the_old_secret_and_its_stream_at_once() {
    let (app, tenant) = tenant_app().await;
    let member = app.member_of(&tenant).await;
    let ws = member.workspace_id;
    let (old, id) = token_of(&app, &member).await;
    let mut stream = Sse::open(&app, &old, ws, "", None).await;
    stream.expect_preamble().await;

    let cpctl = cpctl(&app).await;
    let rotated = cpctl
        .rotate_token(id, span("0s"), &CorrelationId::generate())
        .await
        .unwrap();
    app.get(&stream_path(ws), &old)
        .expect(401, "unauthenticated")
        .await;
    // It ends within 2 s; the rotation's own event (which names no secret) may come first, as
    // any event committed before the stream's next re-check may.
    let ending = stream.until_end().await;
    assert_eq!(ending.comment, "access revoked", "{ending:?}");
    assert!(ending.took < Duration::from_secs(2), "{ending:?}");
    let logged = logged_events(&app, ws).await;
    for seq in &ending.events {
        assert!(
            logged.contains(&(*seq, "token.rotated".to_owned())),
            "{ending:?} {logged:?}"
        );
    }
    let new = rotated.credential.secret.expose();
    assert_eq!(status(&app, &member, new).await, 200);
}

#[tokio::test]
async fn rotating_a_revoked_expired_or_disabled_users_token_or_with_a_long_grace_is_refused() {
    let (app, tenant) = tenant_app().await;
    let member = app.member_of(&tenant).await;
    let (_, id) = reader(&app, &member, &[member.workspace_id]).await;
    let cpctl = cpctl(&app).await;
    let cid = CorrelationId::generate();

    let long = cpctl.rotate_token(id, span("31d"), &cid).await.unwrap_err();
    assert!(long.to_string().contains("at most 30d"), "{long}");
    let unknown = cpctl
        .rotate_token(Uuid::new_v4(), span("1h"), &cid)
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("no such token"), "{unknown}");

    cpctl
        .disable_user(member.user_id, None, &cid)
        .await
        .unwrap();
    let disabled = cpctl.rotate_token(id, span("1h"), &cid).await.unwrap_err();
    assert!(disabled.to_string().contains("disabled user"), "{disabled}");
    cpctl.enable_user(member.user_id, &cid).await.unwrap();

    cpctl
        .revoke_token_access_as_admin(
            None,
            id,
            RevocationReason::parse("gone").unwrap(),
            false,
            &cid,
        )
        .await
        .unwrap();
    let revoked = cpctl.rotate_token(id, span("1h"), &cid).await.unwrap_err();
    assert!(revoked.to_string().contains("is revoked"), "{revoked}");

    let (_, expiring) = token_of(&app, &member).await;
    let past = chrono::Utc::now() - chrono::TimeDelta::seconds(1);
    let updated = sql_exec!(
        &mut app.db().await,
        "UPDATE tokens SET expires_at = $1 WHERE id = $2",
        past,
        expiring
    )
    .unwrap();
    assert_eq!(updated, 1);
    let expired = cpctl
        .rotate_token(expiring, span("1h"), &cid)
        .await
        .unwrap_err();
    assert!(expired.to_string().contains("has expired"), "{expired}");
}

#[tokio::test]
async fn postgres_only_rotation_and_disabling_are_honoured_by_another_replica_at_once() {
    needs!(Postgres);
    const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
    let a = spawn_app_with(|c| c.token_hash_key = Some(HASH_KEY.into())).await;
    let tenant = a.bootstrap().await;
    let member = a.member_of(&tenant).await;
    let b = ServerProcess::start(&a.config, HASH_KEY, RECORD_KEY);
    let (old, id) = token_of(&a, &member).await;
    let path = activity(&member);
    let on_b = |token: String| {
        let request = a
            .client
            .get(format!("{}{path}", b.address))
            .bearer_auth(token);
        async move { request.status_code().await }
    };
    assert_eq!(on_b(old.clone()).await, 200);

    let cpctl = cpctl(&a).await;
    let cid = CorrelationId::generate();
    let rotated = cpctl.rotate_token(id, span("0s"), &cid).await.unwrap();
    let new = rotated.credential.secret.expose().to_owned();
    assert_eq!(on_b(old).await, 401);
    assert_eq!(on_b(new.clone()).await, 200);

    cpctl
        .disable_user(member.user_id, None, &cid)
        .await
        .unwrap();
    assert_eq!(on_b(new.clone()).await, 401);
    cpctl.enable_user(member.user_id, &cid).await.unwrap();
    assert_eq!(on_b(new).await, 200);
}
