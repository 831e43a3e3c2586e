//! A write transaction as both adapters hold it: the transaction, the workspaces whose events
//! it wrote (numbered or announced once it commits, never before), and on SQLite the process's
//! writer turn, given back when it ends. It derefs to the connection, as a transaction does;
//! events go in through each adapter's `audit::insert_event(s)`, which note their workspaces.

use sqlx::{Database, Transaction};
use tokio::sync::OwnedMutexGuard;
use uuid::Uuid;

use super::OutcomeRecord;
use super::dialect::Dialect;
use super::sql::outcomes::insert_outcome;
use crate::storage::{HeldCommit, StoreError};

pub(crate) struct WriteTx<DB: Database> {
    pub(super) tx: Transaction<'static, DB>,
    pub(super) workspaces: Vec<Uuid>,
    pub(super) _turn: Option<OwnedMutexGuard<()>>,
}

impl<DB: Database> WriteTx<DB> {
    pub(super) fn new(tx: Transaction<'static, DB>, turn: Option<OwnedMutexGuard<()>>) -> Self {
        Self {
            tx,
            workspaces: Vec::new(),
            _turn: turn,
        }
    }
}

impl<DB: Database> std::ops::Deref for WriteTx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.tx
    }
}

impl<DB: Database> std::ops::DerefMut for WriteTx<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.tx
    }
}

/// A transaction its writer is done with, committed now or once its keyed request's outcome is
/// known (`storage/write_context.rs`); then the backend numbers or announces the workspaces
/// whose events it wrote ([`Dialect::announce`]), never before: a rolled-back event is never
/// announced.
pub(crate) struct PendingCommit<S: Dialect> {
    pub(crate) tx: WriteTx<S::DB>,
    pub(crate) announcer: S::Announcer,
}

#[async_trait::async_trait]
impl<S: Dialect> HeldCommit for PendingCommit<S> {
    async fn commit(
        self: Box<Self>,
        outcome: Option<&OutcomeRecord>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let Self { mut tx, announcer } = *self;
        if let Some(outcome) = outcome {
            insert_outcome::<S>(&mut tx, outcome, now_ms).await?;
        }
        // The writer's turn (SQLite) is held until the end of this function.
        let WriteTx { tx, workspaces, .. } = tx;
        tx.commit().await.map_err(S::map_err)?;
        S::announce(announcer, workspaces).await;
        Ok(())
    }
}
