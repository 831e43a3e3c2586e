//! The SQLite adapter of the storage ports, for a single replica with an embedded store: one
//! module per port, as in `postgres/`.
//!
//! Write transactions begin IMMEDIATE, taking the database's write lock at their start: writers
//! are serialised, so every check-then-write is atomic without row locks. Uuids are stored as
//! BLOBs, times as RFC 3339 TEXT in UTC (text order is time order), arrays as JSON TEXT.
//!
//! Most statements are shared with Postgres (`storage/records/sql/`); each port file here holds only what
//! SQLite does its own way. This module opens, migrates, begins and commits (announcing, after
//! commit, the workspaces that gained audit events to the change streams of `changes`), maps
//! errors and provides the primitives the shared code needs; `audit` writes events. `fast`
//! keeps the embedded default's idempotency records and nonces in the same file, so they
//! survive a restart.

mod audit;
mod changes;
pub(super) mod copy;
mod dialect;
pub mod files;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Sqlite;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{Change, StoreError};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// How long a statement waits for another writer's lock, and a request for a connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Announcements buffered for a change stream that does not read before it is told to resync.
const ANNOUNCED_CAPACITY: usize = 1024;

#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// Told after commit of each workspace that gained audit events; SQLite has no NOTIFY, so
    /// only this process's writes are announced.
    announced: broadcast::Sender<Change>,
    /// This process's writers take turns here, first come first served, before `BEGIN
    /// IMMEDIATE`. SQLite has one writer at a time either way; left to its busy handler, the
    /// waiters retry on a backoff and a late one can win while an early one sleeps, which is
    /// what made the tail long (822 ms at p99 with 64 writers). Another process (`cpctl`) still
    /// meets the busy timeout.
    writers: Arc<tokio::sync::Mutex<()>>,
}

impl SqliteStore {
    /// Opens (creating when missing, owner-only) the database file and its parent directory;
    /// refuses a file others can read ([`files`]).
    pub async fn open(path: &Path, max_connections: u32) -> Result<Self, StoreError> {
        files::prepare(path)?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(BUSY_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(map_err)?;
        Ok(Self {
            pool,
            announced: broadcast::channel(ANNOUNCED_CAPACITY).0,
            writers: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// Applies pending migrations.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let run = MIGRATOR.run(&self.pool).await;
        run.map_err(super::dialect::migration_failed::<Self>)
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// An SQLite write transaction, holding this process's writer turn (see
/// `records/write_tx.rs`).
pub(crate) type WriteTx = super::write_tx::WriteTx<Sqlite>;

/// Tells this process's listeners which workspaces gained events, once each.
fn announce(announced: &broadcast::Sender<Change>, workspaces: impl Iterator<Item = Uuid>) {
    if announced.receiver_count() == 0 {
        return;
    }
    let mut workspaces: Vec<Uuid> = workspaces.collect();
    workspaces.sort_unstable();
    workspaces.dedup();
    for workspace_id in workspaces {
        // No stream left listening is fine.
        let _ = announced.send(Change::AuditAppended {
            workspace_id,
            sequence: None,
        });
    }
}

pub(crate) fn map_err(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            // SQLite names no constraint; its message names the columns instead.
            let rule = db
                .constraint()
                .or_else(|| db.message().strip_prefix("UNIQUE constraint failed: "))
                .unwrap_or("unique");
            StoreError::Conflict(rule.to_owned())
        }
        sqlx::Error::Database(db) => {
            // Primary result codes: 5 BUSY, 6 LOCKED, 8 READONLY (the file or its folder is
            // not writable now), 10 IOERR, 13 FULL, 14 CANTOPEN.
            let primary = db
                .code()
                .and_then(|code| code.parse::<i32>().ok())
                .map(|code| code & 0xff);
            if matches!(primary, Some(5 | 6 | 8 | 10 | 13 | 14)) {
                StoreError::Unavailable(e.to_string())
            } else {
                StoreError::Internal(e.to_string())
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e.to_string()),
        _ => StoreError::Internal(e.to_string()),
    }
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Internal(format!("cannot encode a list as JSON: {e}")))
}

fn from_json<T: serde::de::DeserializeOwned>(raw: &str) -> Result<T, StoreError> {
    serde_json::from_str(raw)
        .map_err(|e| StoreError::Internal(format!("stored list is not valid JSON: {e}")))
}
