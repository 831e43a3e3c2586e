//! The policy decision log: decisions written in batches by a background writer, listed newest
//! first, and pruned to a row count and an age.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::storage::StoreError;
use crate::storage::WriteContext;

/// One logged decision (docs/operations.md, "Policy decision logs and metrics").
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyDecisionRecord {
    pub occurred_at: DateTime<Utc>,
    /// `authorizer` or `moderator`.
    pub kind: String,
    /// The operation id (authorizer), or what was moderated (`review`, `report`).
    pub operation: String,
    /// allow, deny, publish, hold, reject, hide or failure.
    pub outcome: String,
    /// For a failure: timeout, memory, trap, instantiate or unavailable.
    pub failure: Option<String>,
    /// As the policy gave it (bounded), or the failure's message.
    pub reason: Option<String>,
    pub policy_name: String,
    /// 0 for the built-in default.
    pub policy_version: i32,
    pub policy_digest: String,
    pub latency_us: i64,
    pub correlation_id: Option<String>,
    pub organisation_id: Option<Uuid>,
    pub workspace_id: Option<Uuid>,
}

/// Which decisions a listing asks for; every filter narrows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionFilter {
    pub since: Option<DateTime<Utc>>,
    pub operation: Option<String>,
    pub outcome: Option<String>,
    /// Only decisions listed after this one (newest first): its time and id.
    pub before: Option<(DateTime<Utc>, i64)>,
    pub limit: u32,
}

/// The bounds the log is pruned to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecisionBounds {
    pub max_rows: u64,
    /// Decisions that occurred before this are removed.
    pub older_than: DateTime<Utc>,
}

#[async_trait]
pub trait PolicyDecisionStore: Send + Sync {
    /// Writes a batch in one transaction; returns how many rows were written.
    async fn insert_decisions(
        &self,
        write: &WriteContext,
        decisions: &[PolicyDecisionRecord],
    ) -> Result<u64, StoreError>;
    /// Newest first, each with its id (what a page's cursor names).
    async fn list_decisions(
        &self,
        filter: &DecisionFilter,
    ) -> Result<Vec<(i64, PolicyDecisionRecord)>, StoreError>;
    /// Removes what lies beyond either bound; returns how many rows were removed.
    async fn prune_decisions(&self, bounds: DecisionBounds) -> Result<u64, StoreError>;
}
