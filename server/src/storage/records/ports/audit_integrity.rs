//! The audit log's integrity: its hash chain as stored, checkpoints, retention and export
//! (`service/audit_integrity.rs` holds the rules).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::audit_proof::{CheckpointClaim, Seal, SignedHead};
use crate::domain::{AuditEvent, NewAuditEvent};
use crate::storage::{StoreError, WriteContext};

/// A stored workspace event with the chain hash stored beside it (none before the chain began).
#[derive(Debug, Clone)]
pub struct ChainedEvent {
    pub event: AuditEvent,
    pub hash: Option<Vec<u8>>,
}

/// Where a workspace's chain starts again: after `last_seq`, from `hash` (none: 32 zero bytes).
/// `removed` events were removed by the step that wrote it (0: where the chain began).
/// Retention's name the checkpoint just below them (`prev_seq`, `prev_hash`) and are sealed;
/// the ones migration 0014/0015 wrote are not (`prev_seq` and `seal` none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditCheckpoint {
    pub workspace_id: Uuid,
    pub last_seq: i64,
    pub hash: Option<Vec<u8>>,
    pub removed: i64,
    pub created_at: DateTime<Utc>,
    pub prev_seq: Option<i64>,
    pub prev_hash: Option<Vec<u8>>,
    pub seal: Option<Seal>,
}

impl AuditCheckpoint {
    /// What its seal covers.
    pub fn claim(&self) -> CheckpointClaim {
        CheckpointClaim {
            workspace_id: self.workspace_id,
            last_seq: self.last_seq,
            hash: self.hash.clone(),
            prev_seq: self.prev_seq.unwrap_or(0),
            prev_hash: self.prev_hash.clone(),
            removed: self.removed,
        }
    }
}

/// Seals what retention writes, inside its transaction: the checkpoint, and a signed head at
/// the checkpoint's sequence (its hash as chained), so verify can check one against the other.
pub trait CheckpointSealer: Send + Sync {
    fn seal_checkpoint(&self, claim: &CheckpointClaim) -> (Seal, Option<SignedHead>);
}

/// A workspace's head: the last sequence handed out and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditHead {
    pub seq: i64,
    pub hash: Option<Vec<u8>>,
}

/// A time window of an export: `since` included, `until` excluded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeWindow {
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

#[async_trait]
pub trait AuditIntegrityStore: Send + Sync {
    /// A workspace's numbered events with a sequence above `after`, oldest first, with hashes.
    async fn chained_events(
        &self,
        workspace_id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<ChainedEvent>, StoreError>;
    /// The workspace's head; `None` when there is no such workspace.
    async fn audit_head(&self, workspace_id: Uuid) -> Result<Option<AuditHead>, StoreError>;
    /// The checkpoint with the highest `last_seq`.
    async fn latest_checkpoint(
        &self,
        workspace_id: Uuid,
    ) -> Result<Option<AuditCheckpoint>, StoreError>;
    /// The highest sequence retention removed, if it removed any.
    async fn removed_through(&self, workspace_id: Uuid) -> Result<Option<i64>, StoreError>;
    /// Numbered events above `after` within `window`, oldest first.
    async fn export_events(
        &self,
        workspace_id: Uuid,
        after: i64,
        window: TimeWindow,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError>;
    /// Sets (or clears, `None`) an organisation's retention in seconds; false if no such
    /// organisation.
    async fn set_audit_retention(
        &self,
        write: &WriteContext,
        organisation_id: Uuid,
        seconds: Option<i64>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError>;
    /// Writes `event` alone, in a transaction of its own (an action that changes nothing else,
    /// such as a purge's summary).
    async fn record_event(
        &self,
        write: &WriteContext,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    /// Every workspace whose organisation keeps events for a limited time, with that time in
    /// seconds.
    async fn retention_workspaces(&self) -> Result<Vec<(Uuid, i64)>, StoreError>;
    /// Removes, in one transaction, the oldest events of a workspace that occurred before
    /// `cutoff`, at most `batch` of them and only a run from the oldest (never one after a
    /// younger event), and records a checkpoint at the last one removed, linked to the one
    /// below it and sealed by `sealer` (with its signed head). Returns how many.
    async fn remove_expired_events(
        &self,
        workspace_id: Uuid,
        cutoff: DateTime<Utc>,
        batch: u32,
        now: DateTime<Utc>,
        sealer: &dyn CheckpointSealer,
    ) -> Result<u64, StoreError>;
    /// Every checkpoint of a workspace, lowest `last_seq` first.
    async fn checkpoints(&self, workspace_id: Uuid) -> Result<Vec<AuditCheckpoint>, StoreError>;
    /// Keeps a signed head; false when one at that (workspace, sequence) is kept already (the
    /// first writer wins, so replicas that race sign once).
    async fn insert_signed_head(&self, head: &SignedHead) -> Result<bool, StoreError>;
    /// A workspace's signed heads with a sequence in `from..=to`, lowest first.
    async fn signed_heads(
        &self,
        workspace_id: Uuid,
        from: i64,
        to: i64,
    ) -> Result<Vec<SignedHead>, StoreError>;
    /// The signed head with the highest sequence.
    async fn latest_signed_head(
        &self,
        workspace_id: Uuid,
    ) -> Result<Option<SignedHead>, StoreError>;
    /// Up to `limit` workspaces (after skipping `offset`) whose head is above their latest
    /// signed head, with that head; never signed first, then the oldest signature first.
    async fn heads_to_sign(
        &self,
        limit: u32,
        offset: u32,
    ) -> Result<Vec<(Uuid, AuditHead)>, StoreError>;
}
