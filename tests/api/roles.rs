//! Roles and the admin scopes: only a user whose role administers holds `admin:read` and
//! `admin:write`, issuance never hands them to anyone else, and lowering a role cuts them at
//! the next request of each of the user's tokens. An operator-only operation stays an
//! operator's whatever the active authorizer allows.

use std::sync::Arc;

use control_plane::domain::{
    CorrelationId, ExpiresInDays, RecordCipher, Role, Scope, Scopes, TokenHasher, TokenName,
    WebhookSigner,
};
use control_plane::service::{
    AdminPage, Authorizer, AuthzRequest, Decision, IssueTokenInput, Operation, ServiceDeps,
    ServiceError, ServiceSettings, Services,
};
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

/// A custom authorizer that widens the role table as far as it goes: it allows every question.
struct AllowAll;

#[async_trait::async_trait]
impl Authorizer for AllowAll {
    async fn authorize(&self, _request: &AuthzRequest<'_>) -> Decision {
        Decision::Allow
    }
}

fn forbidden(result: Result<impl std::fmt::Debug, ServiceError>) -> bool {
    matches!(result, Err(ServiceError::Forbidden { .. }))
}

/// The service layer of `app`'s records, asking [`AllowAll`] instead of the policy runtime.
/// (No allow-all component exists among the policy fixtures to activate: `policies/dist` holds
/// only what `policies/build.sh` builds.)
fn allowing_everything(app: &crate::support::TestApp) -> Services {
    Services::new(ServiceDeps {
        store: app.services.store().clone(),
        replica: None,
        authorizer: Arc::new(AllowAll),
        hasher: TokenHasher::new(vec![7; 32]).unwrap(),
        policies: None,
        nonces: None,
        settings: ServiceSettings::default(),
        webhook_signer: Arc::new(WebhookSigner::from_seeds(&[vec![9; 32]]).unwrap()),
        secrets: RecordCipher::new(&[vec![5; 32]]).unwrap(),
    })
}

#[tokio::test]
async fn operator_only_operations_stay_an_operators_under_a_policy_that_allows_everything() {
    let (app, tenant) = tenant_app().await;
    let admin = app
        .user_in_role(&tenant, Role::Admin, &[Scope::AdminRead, Scope::AdminWrite])
        .await;
    let admin = app.services.authenticate(&admin.token).await.unwrap();
    let operator = app.services.authenticate(&tenant.token).await.unwrap();
    assert_eq!((admin.role, operator.role), (Role::Admin, Role::Operator));
    let services = allowing_everything(&app);

    // The policy is in force and widens: another organisation, hidden from an admin by the
    // default policy (404), is administered.
    let elsewhere = app
        .services
        .create_organisation("elsewhere", &CorrelationId::generate())
        .await
        .unwrap()
        .id
        .to_string();
    let page = || AdminPage::parse(None, None).unwrap();
    let hidden = app
        .services
        .admin_list_users(&admin, &elsewhere, page())
        .await;
    assert!(
        matches!(hidden, Err(ServiceError::NotFound { .. })),
        "{hidden:?}"
    );
    services
        .admin_list_users(&admin, &elsewhere, page())
        .await
        .expect("allowed by the policy");

    // Every other operation is the policy's to decide; an operator-only one is refused to the
    // admin with the default policy's 403, and allowed to the operator.
    for op in Operation::bearer() {
        let answer = services.authorize(&admin, op, None, vec![]).await;
        if op.operators_only() {
            assert!(
                matches!(&answer, Err(ServiceError::Forbidden { reason, .. }) if reason == "only an operator may do this"),
                "{}: {answer:?}",
                op.id()
            );
        } else {
            assert!(answer.is_ok(), "{}: {answer:?}", op.id());
        }
        services
            .authorize(&operator, op, None, vec![])
            .await
            .unwrap_or_else(|e| panic!("{}: the operator: {e:?}", op.id()));
    }

    // Through the operations themselves, on the admin's own organisation.
    let own = tenant.organisation_id.to_string();
    let write = control_plane::storage::WriteContext::admin(&CorrelationId::generate());
    assert!(forbidden(
        services
            .admin_create_organisation(&admin, "mine", &write)
            .await
    ));
    assert!(forbidden(
        services.admin_list_organisations(&admin, page()).await
    ));
    assert!(forbidden(
        services
            .admin_set_self_approval(&admin, &own, true, &write)
            .await
    ));
    assert!(forbidden(
        services
            .admin_set_audit_retention(&admin, &own, None, &write)
            .await
    ));
    assert!(forbidden(services.admin_purge_audit(&admin, &write).await));
    assert!(forbidden(services.admit_policy_upload(&admin).await));
    assert!(forbidden(
        services
            .admin_activate_policy(&admin, "std", "1", true, &write)
            .await
    ));
    assert!(forbidden(
        services
            .admin_roll_back_policy(
                &admin,
                control_plane::policy::PolicyKind::Authorizer,
                &write
            )
            .await
    ));
    // Refused before anything was done: no organisation was created.
    let organisations = app
        .services
        .admin_list_organisations(&operator, page())
        .await
        .unwrap();
    assert_eq!(organisations.items.len(), 2, "{:?}", organisations.items);
}
