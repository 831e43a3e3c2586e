//! Storage ports: narrow traits the service layer talks to, and their adapters.
//!
//! The service layer states the rules; an adapter only makes each call atomic. Every mutation
//! takes the audit events that record it and writes them in the same transaction.

mod changes;
pub mod fast;
mod feed;
pub mod keys;
mod memory;
mod open;
mod operations;
mod pg_changes;
mod pg_lane;
mod pg_operations;
pub mod postgres;
mod redis;
mod rows;
mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{AuditEvent, NewAuditEvent};

pub use self::redis::RedisFastState;
pub use changes::{Change, ChangeFeed, ChangeStream, Topic};
pub use fast::{
    Claim, FastStateError, IdempotencyStore, NonceStore, Rate, RateDecision, RateLimiter,
};
pub use feed::AuditFeed;
pub use memory::MemoryFastState;
pub use open::{OpenError, OpenSettings, RecordsLocation, open};
pub use operations::*;
pub use postgres::{AUDIT_CHANNEL, POLICY_CHANNEL, PostgresStore};
pub use sqlite::SqliteStore;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached or did not answer in time: the caller may retry.
    #[error("records store unavailable: {0}")]
    Unavailable(String),
    /// A uniqueness rule refused the write; the string names the rule.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("records store error: {0}")]
    Internal(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Organisation {
    pub id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Workspace {
    pub id: Uuid,
    pub organisation_id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Environment {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct User {
    pub id: Uuid,
    pub organisation_id: Uuid,
    pub email: String,
    pub created_at: DateTime<Utc>,
}

/// A token as stored, without its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRecord {
    pub id: Uuid,
    pub public_id: String,
    pub user_id: Uuid,
    pub organisation_id: Uuid,
    pub name: String,
    pub scopes: Vec<String>,
    /// Workspaces whose grant is still active, in grant order.
    pub workspace_ids: Vec<Uuid>,
    pub environment_ids: Vec<Uuid>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// What authentication needs: the record and the keyed hash of its secret.
#[derive(Debug, Clone)]
pub struct StoredCredential {
    pub token: TokenRecord,
    pub secret_hash: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct NewToken {
    pub record: TokenRecord,
    pub secret_hash: Vec<u8>,
    /// The token that issued this one; its grants on every new workspace are re-checked in the
    /// insert's transaction, so a revocation racing the issuance cannot be escaped.
    pub issuer_token_id: Option<Uuid>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum InsertTokenError {
    #[error("an active token with this name already exists")]
    NameTaken,
    #[error("the owner already holds the maximum number of active tokens")]
    LimitReached,
    #[error("the issuing token lost access to a workspace while issuing")]
    IssuerLostAccess,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which of the referenced organisation, workspaces and environments exist, and where.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetLookup {
    pub organisation_exists: bool,
    /// (workspace id, its organisation id)
    pub workspaces: Vec<(Uuid, Uuid)>,
    /// (environment id, its workspace id)
    pub environments: Vec<(Uuid, Uuid)>,
}

#[derive(Debug, Clone, Default)]
pub struct TokenFilter {
    pub user_id: Option<Uuid>,
    pub workspace_id: Option<Uuid>,
}

/// Revocation of one token's access to one workspace.
#[derive(Debug, Clone)]
pub struct RevokeGrant {
    pub token_id: Uuid,
    pub workspace_id: Uuid,
    pub reason: String,
    pub revoked_at: DateTime<Utc>,
    /// Written with the change; its data gains `tokenRevoked` once known.
    pub event: NewAuditEvent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RevokeOutcome {
    /// True when the token has no workspace left and is revoked entirely.
    pub token_revoked: bool,
}

/// Organisations, workspaces, environments and users: created by the admin CLI.
#[async_trait]
pub trait DirectoryStore: Send + Sync {
    async fn create_organisation(
        &self,
        org: &Organisation,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_organisations(&self) -> Result<Vec<Organisation>, StoreError>;
    async fn create_workspace(
        &self,
        ws: &Workspace,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_workspaces(
        &self,
        organisation_id: Option<Uuid>,
    ) -> Result<Vec<Workspace>, StoreError>;
    async fn create_environment(
        &self,
        env: &Environment,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_environments(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<Environment>, StoreError>;
    async fn create_user(&self, user: &User, event: &NewAuditEvent) -> Result<(), StoreError>;
    async fn list_users(&self, organisation_id: Option<Uuid>) -> Result<Vec<User>, StoreError>;
    async fn get_user(&self, id: Uuid) -> Result<Option<User>, StoreError>;
    async fn get_workspace(&self, id: Uuid) -> Result<Option<Workspace>, StoreError>;
    async fn lookup_targets(
        &self,
        organisation_id: Uuid,
        workspace_ids: &[Uuid],
        environment_ids: &[Uuid],
    ) -> Result<TargetLookup, StoreError>;
}

/// Personal access tokens and their per-workspace grants.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// Inserts the token unless its owner already has an active token of that name or
    /// `max_active` active tokens; checked and written atomically.
    async fn insert_token(
        &self,
        token: &NewToken,
        events: &[NewAuditEvent],
        max_active: u32,
        now: DateTime<Utc>,
    ) -> Result<(), InsertTokenError>;
    async fn find_credential(
        &self,
        public_id: &str,
    ) -> Result<Option<StoredCredential>, StoreError>;
    /// `None` when the token has no active grant on that workspace.
    async fn revoke_grant(&self, revoke: &RevokeGrant)
    -> Result<Option<RevokeOutcome>, StoreError>;
    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>, StoreError>;
}

/// The durable audit log.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// A workspace's events with a sequence below `before` (all when `None`), newest first.
    async fn list_events(
        &self,
        workspace_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError>;
    /// A workspace's events with a sequence above `after`, oldest first.
    async fn events_after(
        &self,
        workspace_id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError>;
}

/// Server-wide settings, such as a generated key kept for the next start.
#[async_trait]
pub trait SettingsStore: Send + Sync {
    async fn ping(&self) -> Result<(), StoreError>;
    async fn setting_get(&self, key: &str) -> Result<Option<String>, StoreError>;
    /// Returns the stored value, inserting `candidate` first when there is none.
    /// The flag is true when `candidate` was inserted.
    async fn setting_get_or_insert(
        &self,
        key: &str,
        candidate: &str,
    ) -> Result<(String, bool), StoreError>;
}

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
        name: &str,
        kind: &str,
        digest: &str,
        bytes: &[u8],
    ) -> Result<PolicyRecord, StoreError>;
    async fn list_policies(&self) -> Result<Vec<PolicyRecord>, StoreError>;
    async fn find_policy(
        &self,
        name: &str,
        version: i32,
    ) -> Result<Option<PolicyRecord>, StoreError>;
    async fn policy_bytes(&self, id: Uuid) -> Result<Option<Vec<u8>>, StoreError>;
    async fn activate_policy(&self, policy: &PolicyRecord) -> Result<(), StoreError>;
    /// Rolls the newest activation of `kind` back; false when there was none.
    async fn rollback_policy(&self, kind: &str) -> Result<bool, StoreError>;
    /// Removes a version that is neither active, nor in the activation history, nor a shadow.
    async fn remove_policy(&self, id: Uuid) -> Result<bool, StoreError>;
    async fn set_shadow(&self, kind: &str, policy: Option<&PolicyRecord>)
    -> Result<(), StoreError>;
    async fn policy_state(&self) -> Result<PolicyState, StoreError>;
    async fn record_disagreement(&self, d: &DisagreementRecord) -> Result<(), StoreError>;
    async fn list_disagreements(&self, limit: u32) -> Result<Vec<DisagreementRecord>, StoreError>;
}

/// Everything the service layer and start-up need of the records store.
pub trait RecordStore:
    DirectoryStore
    + TokenStore
    + AuditStore
    + SettingsStore
    + PolicyStore
    + OperationsStore
    + ChangeFeed
{
}

impl RecordStore for PostgresStore {}

impl RecordStore for SqliteStore {}

pub type SharedRecordStore = Arc<dyn RecordStore>;

/// The fast-state ports the HTTP layer uses, from one adapter.
#[derive(Clone)]
pub struct FastState {
    pub idempotency: Arc<dyn IdempotencyStore>,
    pub limiter: Arc<dyn RateLimiter>,
    pub nonces: Arc<dyn NonceStore>,
}

impl FastState {
    pub fn redis(state: Arc<RedisFastState>) -> Self {
        Self {
            idempotency: state.clone(),
            limiter: state.clone(),
            nonces: state,
        }
    }

    pub fn memory(state: Arc<MemoryFastState>) -> Self {
        Self {
            idempotency: state.clone(),
            limiter: state.clone(),
            nonces: state,
        }
    }
}
