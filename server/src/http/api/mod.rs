//! The v1 operations, one file per resource.

mod activity;
mod pending;
mod tokens;

use poem_openapi::Tags;

pub use activity::ActivityApi;
pub use pending::PendingApi;
pub use tokens::TokensApi;

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
}

/// All v1 APIs, in the order they appear in the document.
pub fn all() -> (TokensApi, ActivityApi, PendingApi) {
    (TokensApi, ActivityApi, PendingApi)
}
