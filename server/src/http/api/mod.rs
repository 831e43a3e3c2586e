//! The v1 operations, one file per resource.

mod activity;
mod admin_tokens;
mod audit;
mod audit_admin;
#[cfg(test)]
mod body_cases;
mod deliveries;
mod fleet;
mod marketplace_admin;
mod me;
mod organisations;
mod policies;
mod reviews;
mod runners;
mod tokens;
mod users;
mod workflow_admin;
mod workflows;

use poem_openapi::{OpenApi, Tags};

pub use activity::ActivityApi;
pub use admin_tokens::AdminTokensApi;
pub use audit::{AuditApi, Heartbeat};
pub use audit_admin::AuditAdminApi;
pub use deliveries::DeliveriesApi;
pub use fleet::FleetApi;
pub use marketplace_admin::MarketplaceAdminApi;
pub use me::MeApi;
pub use organisations::OrganisationsApi;
pub use policies::PoliciesApi;
pub use reviews::ReviewsApi;
pub use runners::RunnersApi;
pub use tokens::TokensApi;
pub use users::UsersApi;
pub use workflow_admin::WorkflowAdminApi;
pub use workflows::WorkflowsApi;

#[derive(Tags)]
pub enum ApiTags {
    /// Personal and workspace access tokens
    Tokens,
    /// Workspace activity and audit
    Audit,
    /// Runner pools, commands and delivery reports
    Runners,
    /// Workflow revisions
    Workflows,
    /// Marketplace plugin reviews
    Marketplace,
    /// The admin plane: organisations, workspaces, environments, users, tokens (beyond the v1 contract)
    Admin,
}

/// All v1 APIs, in the order they appear in the document.
pub fn all() -> impl OpenApi {
    (
        TokensApi,
        ActivityApi,
        AuditApi,
        RunnersApi,
        WorkflowsApi,
        ReviewsApi,
        MeApi,
        OrganisationsApi,
        UsersApi,
        AdminTokensApi,
        // Nested: poem's tuple of APIs has an arity limit.
        (DeliveriesApi, WorkflowAdminApi, MarketplaceAdminApi),
        FleetApi,
        AuditAdminApi,
        PoliciesApi,
    )
}
