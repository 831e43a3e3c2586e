//! The v1 operations, one file per resource.

mod activity;
mod admin_tokens;
mod audit;
#[cfg(test)]
mod body_cases;
mod me;
mod organisations;
mod reviews;
mod runners;
mod tokens;
mod users;
mod workflows;

use poem_openapi::{OpenApi, Tags};

pub use activity::ActivityApi;
pub use admin_tokens::AdminTokensApi;
pub use audit::{AuditApi, Heartbeat};
pub use me::MeApi;
pub use organisations::OrganisationsApi;
pub use reviews::ReviewsApi;
pub use runners::RunnersApi;
pub use tokens::TokensApi;
pub use users::UsersApi;
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
    )
}
