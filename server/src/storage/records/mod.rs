//! The records store: the ports the service layer writes and reads through, and their two
//! adapters, Postgres (`postgres/`) and SQLite (`sqlite/`).
//!
//! - `ports/`: one file per records port (`directory`, `tokens`, `audit`, `settings`,
//!   `policies`, `runners`, `deliveries`, `workflows`, `marketplace`, `outcomes`), its trait and
//!   the records it carries; [`RecordStore`] lists them.
//! - `sql/`: the implementations of those ports that both SQL backends share, one file per port.
//!   Each is compiled twice, as a child module of the port file of the same name in `postgres/`
//!   and in `sqlite/` (`#[path = "../sql/<port>.rs"] mod shared;`): one text serves both
//!   backends without generics over `sqlx::Database`, whose bounds would name every bound type.
//!   sqlx takes `$n` placeholders on both, and most statements read the same. What does not is
//!   a primitive the shared code imports by name: from the adapter's root (`super::super`)
//!   `Store`, `begin`/`commit`, `insert_event`, `map_err`, the row and list-column types with
//!   `list_param`/`decode_list`/`json_param`, `in_uuid_list`, and the row-lock clauses
//!   `FOR_UPDATE`/`FOR_SHARE` (empty on SQLite, whose write transactions hold the database's
//!   write lock from their start); from the adapter's port file (`super`) the statements whose
//!   SQL differs, such as the read pool's queries on Postgres.
//! - `postgres/`, `sqlite/`: the adapters, with the same file per port holding only what the
//!   backend does its own way; `mod.rs` opens, migrates, maps errors and provides the primitives.
//! - `rows.rs`: rows that decode the same on both backends. What the counts a transaction takes
//!   under its lock mean (name taken, the token cap, lost access, a busy pool) is decided once,
//!   in `domain/rules.rs`.
//! - `changes.rs`: the change-feed port (audit events appended, policies changed), implemented
//!   by each adapter's `changes.rs` (Postgres LISTEN/NOTIFY, SQLite in process);
//!   `audit_feed.rs`: the audit fan-out to stream subscribers, fed by it.
//! - `copy.rs`: copies every record of one store into another, empty one (`cpctl store copy`),
//!   table by table from its list of tables, with `sql/copy.rs` and each adapter's `copy.rs`.

mod audit_feed;
mod changes;
pub(crate) mod copy;
mod ports;
pub mod postgres;
pub(crate) mod rows;
mod sqlite;
mod write_tx;

use std::sync::Arc;

pub use audit_feed::AuditFeed;
pub use changes::{Change, ChangeFeed, ChangeStream, Topic};
pub use copy::{CopyError, CopyReport, copy_records};
pub use ports::*;
pub use postgres::{AUDIT_CHANNEL, POLICY_CHANNEL, PostgresStore};
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
    + SettingsStore
    + PolicyStore
    + RunnerStore
    + CommandStore
    + DeliveryStore
    + WorkflowStore
    + MarketplaceStore
    + OutcomeStore
    + ChangeFeed
{
}

impl RecordStore for PostgresStore {}

impl RecordStore for SqliteStore {}

pub type SharedRecordStore = Arc<dyn RecordStore>;
