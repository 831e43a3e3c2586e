//! Holding a keyed request's transaction open until its response is sealed into it.
//!
//! The outcome of a request sent with an `Idempotency-Key` is committed with its change (see
//! `http/idempotency.rs`), but the response exists only once the handler has rendered it, after
//! the service's store call returned. So inside a keyed request (a [`HeldCommits`] scope, set
//! by the idempotency layer around the handler), an adapter's `commit` does not commit: it
//! parks the open transaction here. The idempotency layer then writes the sealed response into
//! it and commits both at once ([`HeldCommit::commit`]), or drops it (a rollback) when the
//! handler was stopped. Every mutation commits through the adapter's one `commit`, so every
//! operation, present and future, is covered without a line of its own; requests without a
//! key commit as before.
//!
//! The transaction stays open only while the handler returns and its response is encoded
//! (microseconds, no I/O). A handler that begins a second write transaction in the same keyed
//! request first commits the parked one without an outcome (`flush`), logged as an error: no
//! v1 operation writes twice, and a second writer must never wait on a lock its own request
//! holds.

use std::future::Future;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::storage::{OutcomeRecord, StoreError};

tokio::task_local! {
    static SCOPE: Arc<HeldCommits>;
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

/// The transaction a keyed request's handler committed, held for its outcome.
#[derive(Default)]
pub struct HeldCommits(Mutex<Option<Box<dyn HeldCommit>>>);

impl HeldCommits {
    /// Runs `work` with this scope: the adapters' commits inside it are held here.
    pub async fn scope<F: Future>(self: &Arc<Self>, work: F) -> F::Output {
        SCOPE.scope(self.clone(), work).await
    }

    /// The held transaction, if the handler committed one.
    pub fn take(&self) -> Option<Box<dyn HeldCommit>> {
        // Nothing panics while holding the lock; a poisoned one still holds a valid value.
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn put(&self, commit: Box<dyn HeldCommit>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(commit);
    }
}

/// Whether the running task is a keyed request whose commit must be held.
pub(super) fn holding() -> bool {
    SCOPE.try_with(|_| ()).is_ok()
}

/// Parks a transaction the adapter was about to commit.
pub(super) fn hold(commit: Box<dyn HeldCommit>) {
    SCOPE.with(|scope| scope.put(commit));
}

/// Commits, without an outcome, a transaction this request already holds: called before a
/// second write transaction begins (see the module doc).
pub(super) async fn flush() -> Result<(), StoreError> {
    let Some(held) = SCOPE.try_with(|scope| scope.take()).ok().flatten() else {
        return Ok(());
    };
    tracing::error!(
        "a keyed request began a second write; its first was committed without its outcome"
    );
    held.commit(None, 0).await
}
