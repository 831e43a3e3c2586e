//! Storage ports: narrow traits the service layer talks to, and their adapters.
//!
//! The service layer states the rules; an adapter only makes each call atomic. Every mutation
//! takes the audit events that record it and writes them in the same transaction.

pub mod fast;
mod feed;
mod memory;
mod ports;
pub mod postgres;
mod redis;
mod rows;
mod rules;
mod sqlite;

use std::sync::Arc;

pub use self::redis::RedisFastState;
pub use fast::{
    Claim, FastStateError, IdempotencyStore, NonceStore, Rate, RateDecision, RateLimiter,
};
pub use feed::AuditFeed;
pub use memory::MemoryFastState;
pub use ports::*;
pub use postgres::{AUDIT_CHANNEL, POLICY_CHANNEL, PostgresStore};
pub use sqlite::SqliteStore;

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
    + WorkflowStore
    + MarketplaceStore
{
    /// The Postgres pool behind the store, for LISTEN; `None` for stores without one.
    fn postgres_pool(&self) -> Option<sqlx::PgPool> {
        None
    }
}

impl RecordStore for PostgresStore {
    fn postgres_pool(&self) -> Option<sqlx::PgPool> {
        Some(self.pool().clone())
    }
}

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
}
