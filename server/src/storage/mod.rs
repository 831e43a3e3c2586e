//! Storage ports: narrow traits the service layer talks to, and their adapters.
//!
//! The service layer states the rules; an adapter only makes each call atomic. Every mutation
//! takes the audit events that record it and writes them in the same transaction.
//!
//! # Layout
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
//!   SQL differs, such as the read lane's queries on Postgres.
//! - `postgres/`, `sqlite/`: the adapters, with the same file per port holding only what the
//!   backend does its own way; `mod.rs` opens, migrates, maps errors and provides the primitives.
//! - `held.rs`: a keyed request's transaction held open until its response is sealed into it
//!   (`ports/outcomes.rs`, the committed outcomes of keyed requests).
//! - `rows.rs`: rows that decode the same on both backends. What the counts a transaction takes
//!   under its lock mean (name taken, the token cap, lost access, a busy pool) is decided once,
//!   in `domain/rules.rs`.
//! - `changes.rs`: the change-feed port (audit events appended, policies changed), implemented
//!   by each adapter's `changes.rs` (Postgres LISTEN/NOTIFY, SQLite in process); `feed.rs`: the
//!   audit fan-out to stream subscribers, fed by it.
//! - `open.rs`: opens the records store a URL or path names, so nothing outside `storage/` knows
//!   which database it talks to.
//! - `copy.rs`: copies every record of one store into another, empty one (`cpctl store copy`),
//!   table by table from its list of tables, with `sql/copy.rs` and each adapter's `copy.rs`.
//! - `fast.rs`, `redis.rs`, `memory.rs`: the fast-state ports and their adapters, with
//!   `sqlite/fast.rs`, which keeps the embedded default's idempotency records and nonces in its
//!   SQLite file; `keys.rs`: every fast-state key layout, built once.

mod changes;
mod copy;
pub mod fast;
mod feed;
pub mod held;
pub mod keys;
mod memory;
mod open;
mod ports;
pub mod postgres;
mod redis;
mod rows;
mod sqlite;

use std::sync::Arc;

pub use self::redis::RedisFastState;
pub use changes::{Change, ChangeFeed, ChangeStream, Topic};
pub use copy::{CopyError, CopyReport, copy_records};
pub use fast::{
    Bucket, Claim, FastStateError, IdempotencyStore, NonceStore, Rate, RateDecision, RateLimiter,
    Verdict,
};
pub use feed::AuditFeed;
pub use memory::MemoryFastState;
pub use open::{OpenError, OpenSettings, Opened, RecordsLocation, open};
pub use ports::*;
pub use postgres::{AUDIT_CHANNEL, POLICY_CHANNEL, PostgresStore};
pub use sqlite::files as embedded_files;
pub use sqlite::{SqliteFastState, SqliteStore};

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

    /// The embedded default: idempotency records and nonces in the SQLite file, so a restart
    /// keeps them; rate limits in process, where a restart only grants a fresh budget.
    pub fn embedded(durable: Arc<SqliteFastState>, limiter: Arc<MemoryFastState>) -> Self {
        Self {
            idempotency: durable.clone(),
            limiter,
            nonces: durable,
        }
    }
}
