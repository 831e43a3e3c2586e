//! A write transaction as both adapters hold it: the transaction, the workspaces whose events
//! it wrote (numbered or announced once it commits, never before), and on SQLite the process's
//! writer turn, given back when it ends. It derefs to the connection, as a transaction does;
//! events go in through each adapter's `audit::insert_event(s)`, which note their workspaces.

use sqlx::{Database, Transaction};
use tokio::sync::OwnedMutexGuard;
use uuid::Uuid;

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
