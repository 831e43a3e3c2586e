//! Roles and the admin scopes: only a user whose role administers holds `admin:read` and
//! `admin:write`, issuance never hands them to anyone else, and lowering a role cuts them at
//! the next request of each of the user's tokens.

use control_plane::domain::{CorrelationId, ExpiresInDays, Role, Scope, Scopes, TokenName};
use control_plane::service::{IssueTokenInput, ServiceError};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Call, Tenant, assert_api_error, events_about, issuance_body, tenant_app};

fn with_scopes(tenant: &Tenant, scopes: &[&str]) -> Value {
    let mut body = issuance_body(tenant);
    body["scopes"] = json!(scopes);
    body
}

#[tokio::test]
async fn a_member_is_never_given_an_admin_scope() {
    let (app, tenant) = tenant_app().await;
    let member = app.member_of(&tenant).await;
    // The admin path (cpctl tokens issue) asks the role.
    let input = IssueTokenInput::new(
        TokenName::parse("escalation").expect("name"),
        [Scope::ActivityRead, Scope::AdminRead]
            .into_iter()
            .collect::<Scopes>(),
        member.organisation_id,
        vec![member.workspace_id],
        vec![],
        ExpiresInDays::default(),
    )
    .expect("input");
    let refused = app
        .services
        .issue_token_for_user(member.user_id, input, &CorrelationId::generate())
        .await
        .expect_err("a member's admin scope");
    assert!(
        matches!(&refused, ServiceError::Forbidden { reason, .. } if reason.contains("admin:read")),
        "{refused:?}"
    );
    // Over HTTP a member's token cannot pass on what it cannot hold.
    let token = app
        .scoped_token(&member, &[Scope::TokensIssue, Scope::ActivityRead])
        .await;
    for scope in ["admin:read", "admin:write"] {
        let response = app
            .issue(&token, &with_scopes(&member, &["activity:read", scope]))
            .await;
        assert_api_error(response, 403, "forbidden").await;
    }
    app.issue(&token, &issuance_body(&member))
        .await
        .ok_response()
        .await;
}

#[tokio::test]
async fn lowering_a_role_cuts_the_admin_scopes_at_the_next_request() {
    let (app, tenant) = tenant_app().await;
    let admin_read = with_scopes(&tenant, &["admin:read"]);
    // Bootstrap's user is the operator, and its token holds every scope.
    app.issue(&tenant.token, &admin_read)
        .await
        .ok_response()
        .await;

    let cid = CorrelationId::generate();
    let lowered = app
        .services
        .set_user_role(tenant.user_id, Role::Member, &cid)
        .await
        .expect("role");
    assert!(lowered.changed);
    assert_eq!(lowered.user.role, Role::Member);
    let again = with_scopes(&tenant, &["admin:read"]);
    assert_api_error(app.issue(&tenant.token, &again).await, 403, "forbidden").await;
    // The token keeps what a member may hold.
    app.issue(&tenant.token, &issuance_body(&tenant))
        .await
        .ok_response()
        .await;

    // The token itself never lost the scope: raised again, the user has it back.
    app.services
        .set_user_role(tenant.user_id, Role::Admin, &cid)
        .await
        .expect("role");
    let back = with_scopes(&tenant, &["admin:read"]);
    app.issue(&tenant.token, &back).await.ok_response().await;
}

#[tokio::test]
async fn a_role_change_is_audited_once_and_a_repeat_changes_nothing() {
    let (app, tenant) = tenant_app().await;
    let member = app.member_of(&tenant).await;
    let cid = CorrelationId::generate();
    let set = |role| app.services.set_user_role(member.user_id, role, &cid);
    assert!(set(Role::Admin).await.expect("role").changed);
    let repeat = set(Role::Admin).await.expect("role");
    assert!(!repeat.changed);
    assert_eq!(repeat.user.role, Role::Admin);
    let (events, _) = events_about(&app, "user.role_changed", member.user_id).await;
    assert_eq!(events, 1);
    let unknown = app
        .services
        .set_user_role(Uuid::new_v4(), Role::Operator, &cid)
        .await
        .expect_err("an unknown user");
    assert!(
        matches!(unknown, ServiceError::NotFound { .. }),
        "{unknown:?}"
    );
}
