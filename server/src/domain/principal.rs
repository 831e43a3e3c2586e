use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{CorrelationId, Role, Scopes};

/// An authenticated caller: a live token and what it grants.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    pub token_id: Uuid,
    /// The token's lookup id (not secret): what re-reads its record, as authentication does.
    pub public_id: String,
    pub user_id: Uuid,
    pub organisation_id: Uuid,
    /// The user's role as authentication read it; `scopes` holds no admin scope it disallows.
    pub role: Role,
    pub scopes: Scopes,
    /// Workspaces whose grant is still active, in the order they were granted.
    pub workspace_ids: Vec<Uuid>,
    /// Empty means "every environment of the granted workspaces".
    pub environment_ids: Vec<Uuid>,
    pub expires_at: DateTime<Utc>,
    /// The request this caller is acting in, when it came over HTTP: recorded with the policy
    /// decisions it asks for, never decided on.
    pub correlation_id: Option<CorrelationId>,
}

impl Principal {
    /// This caller as the request `id` presents it.
    pub fn in_request(self, id: CorrelationId) -> Self {
        Self {
            correlation_id: Some(id),
            ..self
        }
    }

    pub fn has_workspace(&self, workspace_id: Uuid) -> bool {
        self.workspace_ids.contains(&workspace_id)
    }
}
