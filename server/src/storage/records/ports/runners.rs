//! Runner pools, runners and their keys; their commands and deliveries are `commands.rs`.
//!
//! The service layer decides every rule and transition (`domain::states`); each method here
//! applies one change atomically with its audit event, re-checking in the transaction the state
//! the service read, so a concurrent change is seen as a conflict instead of being overwritten.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::NewAuditEvent;
use crate::storage::StoreError;
use crate::storage::WriteContext;

#[derive(Debug, Clone, PartialEq)]
pub struct RunnerPool {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Runner {
    pub id: Uuid,
    pub pool_id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// Where commands are delivered; `None`: the runner receives nothing.
    pub delivery_url: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunnerKey {
    pub id: Uuid,
    pub runner_id: Uuid,
    pub public_key: Vec<u8>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A runner's webhook secrets as stored, sealed by the service: the current one, and the one a
/// rotation replaced with when it stops signing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SealedRunnerSecrets {
    pub current: Option<Vec<u8>>,
    pub previous: Option<(Vec<u8>, DateTime<Utc>)>,
}

/// A key with what signature verification needs to know about its runner.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerKeyLookup {
    pub key: RunnerKey,
    pub pool_id: Uuid,
    pub workspace_id: Uuid,
    pub organisation_id: Uuid,
    /// The key's runner is disabled (by an administrator or the failure rule).
    pub runner_disabled: bool,
}

#[derive(Debug, Clone)]
pub struct DeletePool {
    pub workspace_id: Uuid,
    pub pool_id: Uuid,
    pub reason: Option<String>,
    /// Cancel open commands instead of refusing.
    pub force: bool,
    /// The environments the caller is limited to; empty when it reaches all of them. A limited
    /// caller deletes nothing while an open command lies outside them (see
    /// `rules::pool_deletion_reaches`).
    pub limited_to: Vec<Uuid>,
    pub at: DateTime<Utc>,
    /// Its data gains `cancelledCommands`.
    pub event: NewAuditEvent,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DeletePoolOutcome {
    Deleted {
        pool: RunnerPool,
        cancelled: u64,
    },
    /// Not deleted: this many commands are queued, dispatched or running.
    Busy {
        open: u64,
    },
    /// Not deleted: this many open commands lie outside the caller's environments (a command
    /// without an environment counts as outside).
    OutsideEnvironments {
        open: u64,
    },
    /// No live pool of that id in that workspace.
    NotFound,
}

/// Runner pools, runners and keys (created by the admin CLI), and pool deletion.
#[async_trait]
pub trait RunnerStore: Send + Sync {
    async fn create_pool(
        &self,
        write: &WriteContext,
        pool: &RunnerPool,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_pools(&self, workspace_id: Option<Uuid>) -> Result<Vec<RunnerPool>, StoreError>;
    /// A workspace's pools (deleted ones included) in the order they were created, at most
    /// `limit`, after the pool `after`.
    async fn pools_page(
        &self,
        workspace_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<RunnerPool>, StoreError>;
    async fn get_pool(&self, pool_id: Uuid) -> Result<Option<RunnerPool>, StoreError>;
    /// Inserts the runner with its first key and its sealed webhook secret.
    async fn create_runner(
        &self,
        write: &WriteContext,
        runner: &Runner,
        key: &RunnerKey,
        sealed_secret: &[u8],
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn get_runner(&self, runner_id: Uuid) -> Result<Option<Runner>, StoreError>;
    /// Makes `sealed` the runner's secret; the one it replaces keeps signing until
    /// `previous_retires_at` (an earlier previous one stops at once). False when no such runner.
    async fn rotate_runner_secret(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        sealed: &[u8],
        previous_retires_at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError>;
    /// `None` when no such runner.
    async fn runner_secrets(
        &self,
        runner_id: Uuid,
    ) -> Result<Option<SealedRunnerSecrets>, StoreError>;
    async fn add_runner_key(
        &self,
        write: &WriteContext,
        key: &RunnerKey,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    /// False when the runner has no live key of that id.
    async fn revoke_runner_key(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        key_id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError>;
    async fn find_runner_key(&self, key_id: Uuid) -> Result<Option<RunnerKeyLookup>, StoreError>;
    /// Sets or clears a runner's delivery URL (already checked by the service) and forgets its
    /// failures; false when no such runner. Registering a runner with a URL, setting one, or
    /// adding a key makes the deliveries of its pool that were waiting for a runner due now.
    async fn set_runner_url(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        url: Option<&str>,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError>;

    // Pool deletion, commands and deliveries.
    async fn delete_pool(
        &self,
        write: &WriteContext,
        delete: &DeletePool,
    ) -> Result<DeletePoolOutcome, StoreError>;

    // Timeouts.
}
