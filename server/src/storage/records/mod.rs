//! The records store: the ports the service layer writes and reads through, and their two
//! adapters, Postgres (`postgres/`) and SQLite (`sqlite/`).
//!
//! - `ports/`: one file per records port (`directory`, `tokens`, `audit`, `settings`,
//!   `policies`, `runners`, `deliveries`, `workflows`, `marketplace`, `outcomes`), its trait and
//!   the records it carries; [`RecordStore`] lists them.
//! - `sql/`: the implementations of those ports that both SQL backends share, one file per port,
//!   each generic over the backend's [`dialect::Dialect`]: statements are built and run as
//!   `sql::Stmt`s, whose values and rows both backends encode and decode (a list column is a
//!   `sql::List`, an array on Postgres and JSON text on SQLite). The dialect supplies the
//!   row-lock clauses (empty on SQLite, whose write transactions hold the database's write lock
//!   from their start), transactions, audit events, the request path's reads and the few
//!   statements whose SQL differs.
//! - `postgres/`, `sqlite/`: the adapters: `mod.rs` opens, migrates and maps errors,
//!   `dialect.rs` implements the contract, and a file per port holds what the backend does its
//!   own way (Postgres batches issuances and reports; each writes audit events its way).
//! - `rows.rs`: rows that decode the same on both backends. What the counts a transaction takes
//!   under its lock mean (name taken, the token cap, lost access, a busy pool) is decided once,
//!   in `domain/rules.rs`.
//! - `changes.rs`: the change-feed port (audit events appended, policies changed), implemented
//!   by each adapter's `changes.rs` (Postgres LISTEN/NOTIFY, SQLite in process);
//!   `audit_feed.rs`: the audit fan-out to stream subscribers, fed by it.
//! - `replica.rs`: activity pages and stream replays from a streaming replica when its answer
//!   is the primary's; `postgres/replica.rs` measures its lag.
//! - `copy.rs`: copies every record of one store into another, empty one (`cpctl store copy`),
//!   table by table from its list of tables, with `sql/copy.rs` and each adapter's `copy.rs`.

mod audit_feed;
mod changes;
pub(crate) mod copy;
pub(crate) mod dialect;
mod ports;
pub mod postgres;
mod replica;
pub(crate) mod rows;
mod sql;
mod sqlite;
mod write_tx;

use std::sync::Arc;

pub use audit_feed::AuditFeed;
pub use changes::{Change, ChangeFeed, ChangeStream, Topic};
pub use copy::{CopyError, CopyReport, copy_records};
pub use ports::*;
pub use postgres::{AUDIT_CHANNEL, POLICY_CHANNEL, PostgresStore};
pub use replica::{ReplicaHealth, ReplicaReads, ReplicaStatus};
pub use sqlite::SqliteStore;
pub use sqlite::files as embedded_files;

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

/// Everything the service layer needs of the records store.
pub trait RecordStore:
    DirectoryStore
    + TokenStore
    + AuditStore
    + AuditIntegrityStore
    + SettingsStore
    + PolicyStore
    + PolicyBudgetStore
    + PolicyDecisionStore
    + RunnerStore
    + CommandStore
    + DeliveryStore
    + RunnerAdminStore
    + DeliveryAdminStore
    + WorkflowStore
    + MarketplaceStore
    + OutcomeStore
    + ChangeFeed
{
}

impl RecordStore for PostgresStore {}

impl RecordStore for SqliteStore {}

pub type SharedRecordStore = Arc<dyn RecordStore>;
