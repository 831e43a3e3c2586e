//! Policy versions, activations, shadows and their disagreements.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::storage::StoreError;
use crate::storage::WriteContext;

/// A stored policy version (without its bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRecord {
    pub id: Uuid,
    pub name: String,
    pub kind: String,
    pub version: i32,
    pub digest: String,
    pub size: i64,
    pub created_at: DateTime<Utc>,
}

/// What is in force: the active policy of each kind (`None`: the built-in default) and the
/// authorizer under shadow evaluation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyState {
    pub generation: i64,
    pub authorizer: Option<PolicyRecord>,
    pub moderator: Option<PolicyRecord>,
    pub shadow: Option<PolicyRecord>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DisagreementRecord {
    pub shadow_digest: String,
    pub operation: String,
    pub principal_id: String,
    pub active_decision: String,
    pub shadow_decision: String,
    pub occurred_at: DateTime<Utc>,
}

/// Policy versions, their activation history and shadows. Every change bumps a generation
/// and notifies listening replicas.
#[async_trait]
pub trait PolicyStore: Send + Sync {
    /// Stores a new version of `name` (one more than the newest).
    async fn insert_policy(
        &self,
        write: &WriteContext,
        name: &str,
        kind: &str,
        digest: &str,
        bytes: &[u8],
        budget: &crate::storage::PolicyBudgetRecord,
    ) -> Result<PolicyRecord, StoreError>;
    async fn list_policies(&self) -> Result<Vec<PolicyRecord>, StoreError>;
    async fn find_policy(
        &self,
        name: &str,
        version: i32,
    ) -> Result<Option<PolicyRecord>, StoreError>;
    async fn policy_bytes(&self, id: Uuid) -> Result<Option<Vec<u8>>, StoreError>;
    /// `forced`: activated over a measurement that exceeded its budgets.
    async fn activate_policy(
        &self,
        write: &WriteContext,
        policy: &PolicyRecord,
        forced: bool,
    ) -> Result<(), StoreError>;
    /// Rolls the newest activation of `kind` back; false when there was none.
    async fn rollback_policy(&self, write: &WriteContext, kind: &str) -> Result<bool, StoreError>;
    /// Removes a version that is neither active, nor in the activation history, nor a shadow.
    async fn remove_policy(&self, id: Uuid) -> Result<bool, StoreError>;
    async fn set_shadow(
        &self,
        write: &WriteContext,
        kind: &str,
        policy: Option<&PolicyRecord>,
    ) -> Result<(), StoreError>;
    async fn policy_state(&self) -> Result<PolicyState, StoreError>;
    async fn record_disagreement(&self, d: &DisagreementRecord) -> Result<(), StoreError>;
    async fn list_disagreements(&self, limit: u32) -> Result<Vec<DisagreementRecord>, StoreError>;
}
