//! Committed outcomes of keyed requests: the sealed response a request sent with an
//! `Idempotency-Key` answered, committed in the same transaction as its change (why:
//! `http/idempotency/`; how the transaction is held for it: `storage/write_context.rs`).

use async_trait::async_trait;

use crate::storage::StoreError;

/// What a keyed request commits beside its change.
#[derive(Debug, Clone)]
pub struct OutcomeRecord {
    /// The idempotency record's key (principal, method, operation, key; `storage/fast_state/keys.rs`).
    pub place: String,
    /// The request's fingerprint: a retry with another body must not get this response.
    pub fingerprint: String,
    /// The response, sealed by the HTTP layer (never plain text: it may hold a new secret).
    pub sealed: Vec<u8>,
    /// Unix milliseconds.
    pub expires_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoredOutcome {
    pub fingerprint: String,
    pub sealed: Vec<u8>,
}

#[async_trait]
pub trait OutcomeStore: Send + Sync {
    /// The unexpired outcome committed under `place`, if any.
    async fn find_outcome(
        &self,
        place: &str,
        now_ms: i64,
    ) -> Result<Option<StoredOutcome>, StoreError>;

    /// Commits an outcome in a transaction of its own: a keyed 2xx whose handler wrote nothing.
    /// [`StoreError::Conflict`] when an unexpired outcome already holds the place.
    async fn put_outcome(&self, outcome: &OutcomeRecord, now_ms: i64) -> Result<(), StoreError>;

    /// Deletes up to `limit` expired outcomes, returning how many went.
    async fn purge_outcomes(&self, now_ms: i64, limit: i64) -> Result<u64, StoreError>;
}
