//! Committed outcomes of keyed requests (shared by both SQL adapters; see the layout in
//! `storage/mod.rs`).

use async_trait::async_trait;

use crate::storage::records::dialect::{Conn, Dialect};
use crate::storage::{OutcomeRecord, OutcomeStore, StoreError, StoredOutcome};

/// Writes `outcome` in the caller's transaction. An expired outcome under the same place is
/// replaced; a live one refuses the write, so the transaction carrying a second change under
/// the same key fails and rolls back: the key's one change is already committed.
pub(in crate::storage::records) async fn insert_outcome<S: Dialect>(
    conn: &mut Conn<S>,
    outcome: &OutcomeRecord,
    now_ms: i64,
) -> Result<(), StoreError> {
    let written = S::query(
        "INSERT INTO idempotency_outcomes (place, fingerprint, sealed, expires_at)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (place) DO UPDATE SET fingerprint = excluded.fingerprint,
             sealed = excluded.sealed, expires_at = excluded.expires_at
         WHERE idempotency_outcomes.expires_at <= $5",
    )
    .bind(&outcome.place)
    .bind(&outcome.fingerprint)
    .bind(&outcome.sealed)
    .bind(outcome.expires_at_ms)
    .bind(now_ms)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if written == 0 {
        return Err(StoreError::Conflict(
            "an outcome is already committed under this idempotency key".into(),
        ));
    }
    Ok(())
}

#[async_trait]
impl<S: Dialect> OutcomeStore for S {
    async fn find_outcome(
        &self,
        place: &str,
        now_ms: i64,
    ) -> Result<Option<StoredOutcome>, StoreError> {
        let row: Option<(String, Vec<u8>)> = S::query(
            "SELECT fingerprint, sealed FROM idempotency_outcomes
             WHERE place = $1 AND expires_at > $2",
        )
        .bind(place)
        .bind(now_ms)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(|(fingerprint, sealed)| StoredOutcome {
            fingerprint,
            sealed,
        }))
    }

    async fn put_outcome(&self, outcome: &OutcomeRecord, now_ms: i64) -> Result<(), StoreError> {
        // Committed here, never held: this is the outcome's own transaction.
        let mut tx = self.pool().begin().await.map_err(S::map_err)?;
        insert_outcome::<S>(&mut tx, outcome, now_ms).await?;
        tx.commit().await.map_err(S::map_err)
    }

    async fn purge_outcomes(&self, now_ms: i64, limit: i64) -> Result<u64, StoreError> {
        Ok(S::query(
            "DELETE FROM idempotency_outcomes WHERE place IN
                 (SELECT place FROM idempotency_outcomes WHERE expires_at <= $1 LIMIT $2)",
        )
        .bind(now_ms)
        .bind(limit)
        .execute(self.pool())
        .await?
        .rows_affected())
    }
}
