//! Storage: the records store and the fast state, each behind narrow ports.
//!
//! The service layer states the rules; an adapter only makes each call atomic. Every mutation
//! takes a [`WriteContext`] and the audit events that record it, and writes them in one
//! transaction.
//!
//! # Layout
//! - `records/`: the records store (Postgres or SQLite): `ports/` (one trait per concern),
//!   `sql/` (the statements both backends share), `postgres/` and `sqlite/` (the adapters),
//!   `copy.rs` (`cpctl store copy`), `changes.rs` (the change-feed port) and `audit_feed.rs`
//!   (the fan-out to audit stream subscribers), `rows.rs` (rows both backends decode).
//! - `fast_state/`: idempotency claims, rate limits and nonces: the ports in `mod.rs`, and the
//!   `redis` (a single Redis or a cluster: `redis_location.rs` parses `REDIS_URL`,
//!   `redis_connection.rs` connects), `memory` and `sqlite` (the embedded default's file)
//!   adapters; `keys.rs` builds every key.
//! - `write_context.rs`: what every write takes: its correlation id, actor, and whether its
//!   transaction is held open until a keyed request's response is sealed into it.
//! - `open.rs`: opens the stores a URL or path names, so nothing outside `storage/` knows which
//!   database it talks to.

pub mod fast_state;
mod open;
pub mod records;
mod write_context;

use std::sync::Arc;

pub use fast_state::{
    Bucket, Claim, FastStateError, HeldKey, IdempotencyStore, MemoryFastState, NonceStore, Rate,
    RateDecision, RateLimiter, RedisConnection, RedisFastState, RedisLocation, RedisLocationError,
    SignOuts, SqliteFastState, UseClaims, Verdict, keys,
};
pub use open::{OpenError, OpenSettings, Opened, ReadReplica, RecordsLocation, open};
pub use records::*;
pub use write_context::{HeldCommit, OutcomeSlot, WriteContext};

/// The fast-state ports the HTTP layer uses, from one adapter.
#[derive(Clone)]
pub struct FastState {
    pub idempotency: Arc<dyn IdempotencyStore>,
    pub limiter: Arc<dyn RateLimiter>,
    pub nonces: Arc<dyn NonceStore>,
    /// Who writes each token's last use in the current window.
    pub use_claims: Arc<dyn UseClaims>,
    /// Console sessions ended before their time.
    pub sign_outs: Arc<dyn SignOuts>,
}

impl FastState {
    pub fn redis(state: Arc<RedisFastState>) -> Self {
        Self {
            idempotency: state.clone(),
            limiter: state.clone(),
            nonces: state.clone(),
            sign_outs: state.clone(),
            use_claims: state,
        }
    }

    pub fn memory(state: Arc<MemoryFastState>) -> Self {
        Self {
            idempotency: state.clone(),
            limiter: state.clone(),
            nonces: state.clone(),
            sign_outs: state.clone(),
            use_claims: state,
        }
    }

    /// The embedded default: idempotency records and nonces in the SQLite file, so a restart
    /// keeps them; rate limits in process, where a restart only grants a fresh budget. Last-use
    /// claims in the file too, so a restart does not write every token's last use again at once.
    pub fn embedded(durable: Arc<SqliteFastState>, limiter: Arc<MemoryFastState>) -> Self {
        Self {
            idempotency: durable.clone(),
            limiter,
            nonces: durable.clone(),
            sign_outs: durable.clone(),
            use_claims: durable,
        }
    }
}
