use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Scopes;

/// An authenticated caller: a live token and what it grants.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    pub token_id: Uuid,
    /// The token's lookup id (not secret): what re-reads its record, as authentication does.
    pub public_id: String,
    pub user_id: Uuid,
    pub organisation_id: Uuid,
    pub scopes: Scopes,
    /// Workspaces whose grant is still active, in the order they were granted.
    pub workspace_ids: Vec<Uuid>,
    /// Empty means "every environment of the granted workspaces".
    pub environment_ids: Vec<Uuid>,
    pub expires_at: DateTime<Utc>,
}

impl Principal {
    pub fn has_workspace(&self, workspace_id: Uuid) -> bool {
        self.workspace_ids.contains(&workspace_id)
    }
}
