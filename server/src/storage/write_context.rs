//! A write's context: who writes, under which correlation id, and how its transaction ends.
//!
//! Every port method that writes takes a [`WriteContext`]; the adapters' `begin` and `commit`
//! read it, and nothing else decides how a commit behaves. Most contexts commit at once
//! ([`WriteContext::immediate`]). A keyed request's context is built by the idempotency layer
//! (`http/idempotency/`) with an [`OutcomeSlot`]: its `commit` does not commit but parks the
//! open transaction in the slot, and the idempotency layer then writes the sealed response into
//! it and commits both at once ([`HeldCommit::commit`]), or drops it (a rollback) when the
//! handler was stopped. The transaction stays open only while the handler returns and its
//! response is encoded (microseconds, no I/O).
//!
//! A second write transaction begun with a context whose slot already holds one first commits
//! the held one without an outcome (logged as an error): no v1 operation writes twice, and a
//! second writer must never wait on a lock its own request holds.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::domain::{Actor, CorrelationId};
use crate::storage::{OutcomeRecord, StoreError};

/// Who writes, under which correlation id, and whether the transaction waits for an outcome.
#[derive(Clone)]
pub struct WriteContext {
    correlation_id: CorrelationId,
    actor: Actor,
    outcome: Option<Arc<OutcomeSlot>>,
}

impl std::fmt::Debug for WriteContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteContext")
            .field("correlation_id", &self.correlation_id)
            .field("actor", &self.actor)
            .field("held", &self.outcome.is_some())
            .finish()
    }
}

impl WriteContext {
    /// A write whose transactions commit when the adapter is done with them.
    pub fn immediate(correlation_id: CorrelationId, actor: Actor) -> Self {
        Self {
            correlation_id,
            actor,
            outcome: None,
        }
    }

    /// An operator's write through `cpctl`.
    pub fn admin(correlation_id: &CorrelationId) -> Self {
        Self::immediate(correlation_id.clone(), Actor::admin())
    }

    /// The control plane's own write, with nobody asking (a timeout, a key at start).
    pub fn system() -> Self {
        Self::immediate(CorrelationId::generate(), Actor::system())
    }

    /// A keyed request's write: its transaction is parked in `slot` for its outcome.
    pub fn held(correlation_id: CorrelationId, actor: Actor, slot: Arc<OutcomeSlot>) -> Self {
        Self {
            correlation_id,
            actor,
            outcome: Some(slot),
        }
    }

    pub fn correlation_id(&self) -> &CorrelationId {
        &self.correlation_id
    }

    pub fn actor(&self) -> Actor {
        self.actor
    }

    /// Whether a commit parks the transaction for an outcome: a write batched with others'
    /// cannot be, so the batchers send such a write alone.
    pub fn holds(&self) -> bool {
        self.outcome.is_some()
    }

    /// Called by an adapter before it begins a transaction (see the module doc).
    pub(super) async fn before_begin(&self) -> Result<(), StoreError> {
        let Some(held) = self.outcome.as_ref().and_then(|slot| slot.take()) else {
            return Ok(());
        };
        tracing::error!(
            "a keyed request began a second write; its first was committed without its outcome"
        );
        held.commit(None, 0).await
    }

    /// Called by an adapter's `commit` with the transaction it is done with: parked in the
    /// slot for its outcome when this context holds, committed now otherwise.
    pub(super) async fn commit_or_hold<C: HeldCommit + 'static>(
        &self,
        pending: C,
    ) -> Result<(), StoreError> {
        let Some(slot) = &self.outcome else {
            return Box::new(pending).commit(None, 0).await;
        };
        // Two writes of one keyed request held at once (no v1 operation does this): the
        // earlier is committed without its outcome rather than dropped, which would roll back
        // a change that already answered success.
        if let Some(earlier) = slot.replace(Box::new(pending)) {
            tracing::error!(
                "two writes of one keyed request were held at once; the earlier was committed without its outcome"
            );
            earlier.commit(None, 0).await?;
        }
        Ok(())
    }
}

/// An open write transaction waiting for its outcome.
#[async_trait]
pub trait HeldCommit: Send {
    /// Writes `outcome` (when there is one) in the transaction, then commits it. A live
    /// outcome already under the same place fails with [`StoreError::Conflict`] and rolls back.
    async fn commit(
        self: Box<Self>,
        outcome: Option<&OutcomeRecord>,
        now_ms: i64,
    ) -> Result<(), StoreError>;
}

/// Where a keyed request's committed-by-its-handler transaction waits for its outcome.
#[derive(Default)]
pub struct OutcomeSlot(Mutex<Option<Box<dyn HeldCommit>>>);

impl OutcomeSlot {
    /// The held transaction, if the handler committed one.
    pub fn take(&self) -> Option<Box<dyn HeldCommit>> {
        // Nothing panics while holding the lock; a poisoned one still holds a valid value.
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Parks `commit`, giving back one parked before it.
    fn replace(&self, commit: Box<dyn HeldCommit>) -> Option<Box<dyn HeldCommit>> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(commit)
    }
}
