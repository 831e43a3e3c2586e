//! What tests set up again and again, through the service layer as `cpctl` would: a tenant
//! (organisation, workspace, admin user, token with every scope), more workspaces,
//! environments and tokens for it, runner pools, a valid issuance body, the deny-all policy.

use control_plane::domain::{CorrelationId, ExpiresInDays, Role, Scope, Scopes, TokenName};
use control_plane::service::{BootstrapInput, IssueTokenInput, Services};
use control_plane::storage::WriteContext;
use serde_json::Value;
use uuid::Uuid;

use super::client::Call;
use super::server::TestApp;

/// A bootstrapped organisation: one workspace, one admin user, a token with every scope.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub organisation_id: Uuid,
    pub workspace_id: Uuid,
    pub user_id: Uuid,
    pub token: String,
}

impl TestApp {
    /// A second, non-admin user of the tenant's organisation, as a `Tenant` whose tokens are
    /// its: its tokens can be cut off while the tenant's admin token (which writes the events)
    /// goes on.
    pub async fn member_of(&self, tenant: &Tenant) -> Tenant {
        let user = self
            .services
            .create_user(
                tenant.organisation_id,
                &format!("member-{}@example.com", Uuid::new_v4().simple()),
                &CorrelationId::generate(),
            )
            .await
            .expect("user");
        Tenant {
            user_id: user.id,
            ..tenant.clone()
        }
    }

    /// The tenant's workspace activity (`query` appended to the path, e.g. `?limit=100`), as
    /// its admin reads it: asserts a 200 and returns the page.
    pub async fn activity(&self, tenant: &Tenant, query: &str) -> Value {
        let path = format!("/v1/workspaces/{}/activity{query}", tenant.workspace_id);
        self.get(&path, &tenant.token).ok().await
    }

    /// Bootstraps a tenant through the service layer, as `cpctl bootstrap` does, with a 90-day
    /// token.
    pub async fn bootstrap(&self) -> Tenant {
        let suffix = Uuid::new_v4().simple().to_string();
        let done = self
            .services
            .bootstrap(
                BootstrapInput {
                    organisation: format!("org-{suffix}"),
                    workspace: "main".into(),
                    admin_email: format!("admin-{suffix}@example.com"),
                    // The longest lifetime, so the 30-day tokens it issues are not capped.
                    expires_in_days: ExpiresInDays::parse(90).expect("days"),
                },
                &CorrelationId::generate(),
            )
            .await
            .expect("bootstrap");
        Tenant {
            organisation_id: done.organisation.id,
            workspace_id: done.workspace.id,
            user_id: done.user.id,
            token: done.credential.secret.expose().to_owned(),
        }
    }

    pub async fn create_workspace(&self, organisation_id: Uuid, name: &str) -> Uuid {
        self.services
            .create_workspace(organisation_id, name, &CorrelationId::generate())
            .await
            .expect("workspace")
            .id
    }

    pub async fn create_environment(&self, workspace_id: Uuid, name: &str) -> Uuid {
        self.services
            .create_environment(workspace_id, name, &CorrelationId::generate())
            .await
            .expect("environment")
            .id
    }

    /// A token of the tenant's admin with `scopes` on its one workspace, nothing else.
    pub async fn scoped_token(&self, tenant: &Tenant, scopes: &[Scope]) -> String {
        self.admin_token(tenant, scopes, &[tenant.workspace_id], &[])
            .await
    }

    /// Issues a token with [`issuance_body`] over HTTP as the tenant's admin, asserting a 200;
    /// the response body (`credential.id`, `credential.token` ...).
    pub async fn issued(&self, tenant: &Tenant) -> Value {
        self.issue(&tenant.token, &issuance_body(tenant))
            .await
            .ok()
            .await
    }

    /// Issues a token for `user` through the admin path: any scopes, workspaces, environments.
    pub async fn admin_token(
        &self,
        tenant: &Tenant,
        scopes: &[Scope],
        workspaces: &[Uuid],
        environments: &[Uuid],
    ) -> String {
        let input = IssueTokenInput::new(
            TokenName::parse(&format!("t-{}", Uuid::new_v4().simple())).expect("name"),
            scopes.iter().copied().collect::<Scopes>(),
            tenant.organisation_id,
            workspaces.to_vec(),
            environments.to_vec(),
            ExpiresInDays::default(),
        )
        .expect("input");
        self.services
            .issue_token_for_user(tenant.user_id, input, &CorrelationId::generate())
            .await
            .expect("issue")
            .secret
            .expose()
            .to_owned()
    }
}

/// A user of a tenant's organisation with a role, and one token of it.
#[derive(Debug, Clone)]
pub struct RoleHolder {
    pub user_id: Uuid,
    pub token_id: Uuid,
    pub token: String,
}

impl TestApp {
    /// A new user of the tenant's organisation in `role`, with a token holding `scopes` on the
    /// tenant's workspace (issued through the admin path, as `cpctl tokens issue` does).
    pub async fn user_in_role(&self, tenant: &Tenant, role: Role, scopes: &[Scope]) -> RoleHolder {
        let cid = CorrelationId::generate();
        let user = self
            .services
            .create_user_as(
                tenant.organisation_id,
                &format!("{role}-{}@example.com", Uuid::new_v4().simple()),
                role,
                &cid,
            )
            .await
            .expect("user");
        let input = IssueTokenInput::new(
            TokenName::parse(&format!("t-{}", Uuid::new_v4().simple())).expect("name"),
            scopes.iter().copied().collect::<Scopes>(),
            tenant.organisation_id,
            vec![tenant.workspace_id],
            vec![],
            ExpiresInDays::default(),
        )
        .expect("input");
        let credential = self
            .services
            .issue_token_for_user(user.id, input, &cid)
            .await
            .expect("issue");
        RoleHolder {
            user_id: user.id,
            token_id: credential.record.id,
            token: credential.secret.expose().to_owned(),
        }
    }
}

/// A runner pool made through the service layer, as `cpctl pools create` does.
pub async fn create_pool(app: &TestApp, workspace: Uuid, name: &str) -> Uuid {
    app.services
        .create_pool(
            workspace,
            name,
            &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
        )
        .await
        .expect("pool")
        .id
}

/// A valid issuance body for `tenant`, to be varied by each test.
pub fn issuance_body(tenant: &Tenant) -> Value {
    serde_json::json!({
        "name": format!("token-{}", Uuid::new_v4().simple()),
        "scopes": ["activity:read"],
        "organisationId": tenant.organisation_id,
        "workspaceIds": [tenant.workspace_id],
    })
}

/// An anonymous admin's write: how a test's direct policy change is recorded.
pub fn admin_write() -> WriteContext {
    WriteContext::admin(&CorrelationId::generate())
}

/// An organisation of its own whose audit log records a test's direct policy changes, for a
/// test with no tenant at hand.
pub async fn policy_log(services: &Services) -> Uuid {
    let name = format!("policies-{}", Uuid::new_v4().simple());
    services
        .create_organisation(&name, &CorrelationId::generate())
        .await
        .expect("organisation")
        .id
}

/// Installs the deny-all test policy and makes it the active authorizer, as `cpctl policies
/// install` then `activate` would; every replica on these records picks it up.
pub async fn activate_deny_all(services: &Services) {
    let log = policy_log(services).await;
    let policy = services
        .install_policy(
            "deny-all",
            control_plane::policy::PolicyKind::Authorizer,
            control_plane::policy::fixtures::DENY_ALL,
            &admin_write(),
            log,
        )
        .await
        .unwrap();
    // Forced: its budgets are `policy_budgets.rs`'s subject, and a p99 measured while the
    // whole suite runs on two cores can pass 50 ms for a component that decides in 0.1 ms.
    services
        .activate_policy_with(
            &format!("deny-all@{}", policy.version),
            true,
            &admin_write(),
            log,
        )
        .await
        .unwrap();
}

/// A fresh app with one bootstrapped tenant: how most tests begin.
pub async fn tenant_app() -> (TestApp, Tenant) {
    let app = super::server::spawn_app().await;
    let tenant = app.bootstrap().await;
    (app, tenant)
}
