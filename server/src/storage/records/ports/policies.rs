//! Policy versions, activations, shadows and their disagreements.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::NewAuditEvent;
use crate::policy::Instances;
use crate::storage::StoreError;
use crate::storage::WriteContext;

/// A change's audit event, made from the version it touched once the transaction knows it (a
/// new version's number, the version a rollback undid).
pub type PolicyEvent<'a> = &'a (dyn Fn(&PolicyRecord) -> NewAuditEvent + Send + Sync);

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
    /// Fresh instances for every decision, or warm ones per organisation; chosen at install.
    pub instances: Instances,
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
/// and notifies listening replicas, and writes its audit event in its transaction.
#[async_trait]
pub trait PolicyStore: Send + Sync {
    /// Stores a new version of `name` (one more than the newest).
    #[allow(
        clippy::too_many_arguments,
        reason = "the version, its measurement and its event"
    )]
    async fn insert_policy(
        &self,
        write: &WriteContext,
        name: &str,
        kind: &str,
        digest: &str,
        bytes: &[u8],
        instances: Instances,
        budget: &crate::storage::PolicyBudgetRecord,
        event: PolicyEvent<'_>,
    ) -> Result<PolicyRecord, StoreError>;
    async fn list_policies(&self) -> Result<Vec<PolicyRecord>, StoreError>;
    /// At most `limit` versions by name then version, after the version whose id is `after`.
    async fn policies_page(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<PolicyRecord>, StoreError>;
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
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    /// Rolls the newest activation of `kind` back (its version is the event's) and gives what
    /// is active after it (`Some(None)`: the built-in default), read in its transaction: a
    /// keyed request's write is not committed until its response is stored. `None` when there
    /// was none, and nothing is written.
    async fn rollback_policy(
        &self,
        write: &WriteContext,
        kind: &str,
        event: PolicyEvent<'_>,
    ) -> Result<Option<Option<PolicyRecord>>, StoreError>;
    /// Removes a version that is neither active, nor in the activation history, nor a shadow;
    /// false (nothing written) otherwise.
    async fn remove_policy(
        &self,
        write: &WriteContext,
        id: Uuid,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError>;
    async fn set_shadow(
        &self,
        write: &WriteContext,
        kind: &str,
        policy: Option<&PolicyRecord>,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn policy_state(&self) -> Result<PolicyState, StoreError>;
    async fn record_disagreement(&self, d: &DisagreementRecord) -> Result<(), StoreError>;
    /// At most `limit` disagreements with their ids, newest first, older than the id `before`.
    async fn list_disagreements(
        &self,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, DisagreementRecord)>, StoreError>;
}
