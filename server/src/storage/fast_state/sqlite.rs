//! The embedded default's durable fast state: idempotency records, their stored-bytes quota
//! counts and runner nonces, in the SQLite file, so a restart loses neither a replay nor replay
//! protection. Rate limits stay in process (`storage/fast_state/memory.rs`): a restart that forgets them
//! only grants a fresh budget.
//!
//! Same promises as the Redis and in-process adapters (`storage/fast_state/mod.rs`): keys from
//! `storage/fast_state/keys.rs`, leases and TTLs, atomic claims. Each operation is one statement, or one
//! `BEGIN IMMEDIATE` transaction (a claim reads, then writes), so it is atomic against every
//! connection to the file. Expiries are Unix milliseconds of the wall clock, not `Instant`s,
//! because they must mean the same to the next process; a row whose expiry has passed is
//! absent to every reader, and [`SqliteFastState::purge`] deletes such rows in small batches.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::SqlitePool;

use crate::storage::SqliteStore;
use crate::storage::fast_state::{
    Claim, FastResult, FastStateError, HeldKey, IdempotencyStore, NonceStore,
};

/// Rows deleted per purge statement: each holds the write lock briefly, so a large backlog of
/// expired rows never stalls requests behind one long delete.
const PURGE_BATCH: i64 = 500;

#[derive(Clone)]
pub struct SqliteFastState {
    pool: SqlitePool,
}

impl std::fmt::Debug for SqliteFastState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteFastState").finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// The durable fast state of this file, on the records store's own pool.
    pub fn fast_state(&self) -> SqliteFastState {
        SqliteFastState {
            pool: self.pool().clone(),
        }
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn after(now: i64, ttl: Duration) -> i64 {
    now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

/// One statement with its bound values.
type Statement<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>;

fn unavailable(e: sqlx::Error) -> FastStateError {
    // sqlx names the failure, never a bound value: no record or key reaches the message.
    FastStateError::Unavailable(format!("embedded store: {e}"))
}

impl SqliteFastState {
    /// Runs one statement on the pool; returns how many rows it changed.
    async fn execute(&self, statement: Statement<'_>) -> Result<u64, FastStateError> {
        let done = statement.execute(&self.pool).await.map_err(unavailable)?;
        Ok(done.rows_affected())
    }

    /// Deletes every expired record, quota count and nonce; returns how many rows went.
    pub async fn purge(&self) -> Result<u64, FastStateError> {
        let now = now_ms();
        let mut removed = 0;
        for statement in [
            "DELETE FROM embedded_idempotency_records WHERE rowid IN \
             (SELECT rowid FROM embedded_idempotency_records WHERE expires_at <= $1 LIMIT $2)",
            "DELETE FROM embedded_idempotency_quotas WHERE rowid IN \
             (SELECT rowid FROM embedded_idempotency_quotas WHERE window_ends_at <= $1 LIMIT $2)",
            "DELETE FROM embedded_nonces WHERE rowid IN \
             (SELECT rowid FROM embedded_nonces WHERE expires_at <= $1 LIMIT $2)",
        ] {
            loop {
                let batch = sqlx::query(statement).bind(now).bind(PURGE_BATCH);
                let done = self.execute(batch).await?;
                removed += done;
                if done < PURGE_BATCH as u64 {
                    break;
                }
            }
        }
        Ok(removed)
    }

    /// Purges every `interval`, for as long as the process runs; the first purge is at once,
    /// so rows that expired while the server was down go at start-up.
    pub fn purge_every(&self, interval: Duration) {
        let state = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval.max(Duration::from_secs(1)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                match state.purge().await {
                    Ok(0) => {}
                    Ok(removed) => tracing::debug!(removed, "purged expired embedded state"),
                    Err(e) => tracing::warn!(error = %e, "could not purge expired embedded state"),
                }
            }
        });
    }

    /// Rows stored, expired or not, for tests of purging.
    #[cfg(test)]
    async fn rows(&self) -> i64 {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM embedded_idempotency_records)
                  + (SELECT count(*) FROM embedded_idempotency_quotas)
                  + (SELECT count(*) FROM embedded_nonces)",
        )
        .fetch_one(&self.pool)
        .await
        .unwrap();
        n
    }
}

#[async_trait]
impl IdempotencyStore for SqliteFastState {
    async fn claim(&self, key: &str, fingerprint: &str, lease: Duration) -> FastResult<Claim> {
        let now = now_ms();
        // IMMEDIATE: the write lock from the start, so nothing changes between read and write.
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(unavailable)?;
        let live: Option<(Option<String>, String, Option<Vec<u8>>)> = sqlx::query_as(
            "SELECT owner, fingerprint, record FROM embedded_idempotency_records
             WHERE key = $1 AND expires_at > $2",
        )
        .bind(key)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await
        .map_err(unavailable)?;
        let claim = match live {
            Some((_, fingerprint, Some(record))) => Claim::Done {
                fingerprint,
                record,
            },
            Some((_, fingerprint, None)) => Claim::InFlight { fingerprint },
            None => {
                let owner = uuid::Uuid::new_v4().simple().to_string();
                // Replaces an expired row of the key, if any.
                sqlx::query(
                    "INSERT OR REPLACE INTO embedded_idempotency_records
                         (key, owner, fingerprint, record, expires_at)
                     VALUES ($1, $2, $3, NULL, $4)",
                )
                .bind(key)
                .bind(&owner)
                .bind(fingerprint)
                .bind(after(now, lease))
                .execute(&mut *tx)
                .await
                .map_err(unavailable)?;
                Claim::Acquired { owner }
            }
        };
        tx.commit().await.map_err(unavailable)?;
        Ok(claim)
    }

    async fn complete(&self, held: HeldKey<'_>, record: &[u8], ttl: Duration) -> FastResult<()> {
        let (key, owner, fingerprint) = (held.key, held.owner, held.fingerprint);
        let now = now_ms();
        // Only our own live claim: a lease that ran out may belong to another request now.
        let complete = sqlx::query(
            "UPDATE embedded_idempotency_records
             SET owner = NULL, fingerprint = $3, record = $4, expires_at = $5
             WHERE key = $1 AND owner = $2 AND expires_at > $6",
        )
        .bind(key)
        .bind(owner)
        .bind(fingerprint)
        .bind(record)
        .bind(after(now, ttl))
        .bind(now);
        self.execute(complete).await?;
        Ok(())
    }

    async fn release(&self, held: HeldKey<'_>) -> FastResult<()> {
        let (key, owner) = (held.key, held.owner);
        let release =
            sqlx::query("DELETE FROM embedded_idempotency_records WHERE key = $1 AND owner = $2");
        self.execute(release.bind(key).bind(owner)).await?;
        Ok(())
    }

    async fn discard(&self, key: &str) -> FastResult<()> {
        let discard = sqlx::query("DELETE FROM embedded_idempotency_records WHERE key = $1");
        self.execute(discard.bind(key)).await?;
        Ok(())
    }

    async fn stored_bytes(&self, key: &str) -> FastResult<(u64, Duration)> {
        let now = now_ms();
        let row: Option<(i64, i64)> = sqlx::query_as(
            "SELECT bytes, window_ends_at FROM embedded_idempotency_quotas
             WHERE key = $1 AND window_ends_at > $2",
        )
        .bind(key)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(row.map_or((0, Duration::ZERO), |(bytes, ends)| {
            (
                bytes.max(0) as u64,
                Duration::from_millis((ends - now).max(0) as u64),
            )
        }))
    }

    async fn count_stored(&self, key: &str, bytes: u64, window: Duration) -> FastResult<()> {
        let now = now_ms();
        // One statement: a window that has ended starts again from these bytes. SET reads the
        // old row on every right-hand side, so both columns see the same ended window.
        let count = sqlx::query(
            "INSERT INTO embedded_idempotency_quotas (key, bytes, window_ends_at)
             VALUES ($1, $2, $3)
             ON CONFLICT (key) DO UPDATE SET
                 bytes = CASE WHEN window_ends_at <= $4 THEN excluded.bytes
                              ELSE bytes + excluded.bytes END,
                 window_ends_at = CASE WHEN window_ends_at <= $4 THEN excluded.window_ends_at
                                       ELSE window_ends_at END",
        )
        .bind(key)
        .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
        .bind(after(now, window))
        .bind(now);
        self.execute(count).await?;
        Ok(())
    }
}

#[async_trait]
impl NonceStore for SqliteFastState {
    async fn remember(&self, key: &str, ttl: Duration) -> Result<bool, FastStateError> {
        let now = now_ms();
        // One statement: a new key is inserted, an expired one taken again, a live one left
        // alone (no row changed: a replay).
        let remember = sqlx::query(
            "INSERT INTO embedded_nonces (key, expires_at) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at
             WHERE embedded_nonces.expires_at <= $3",
        )
        .bind(key)
        .bind(after(now, ttl.max(Duration::from_millis(1))))
        .bind(now);
        Ok(self.execute(remember).await? == 1)
    }
}

#[async_trait]
impl super::SignOuts for SqliteFastState {
    /// Kept with the nonces, under the sign-out's own key.
    async fn end(&self, key: &str, ttl: Duration) -> Result<(), FastStateError> {
        NonceStore::remember(self, key, ttl).await.map(drop)
    }

    async fn has_ended(&self, key: &str) -> Result<bool, FastStateError> {
        let row: Option<(i64,)> =
            sqlx::query_as("SELECT 1 FROM embedded_nonces WHERE key = $1 AND expires_at > $2")
                .bind(key)
                .bind(now_ms())
                .fetch_optional(&self.pool)
                .await
                .map_err(unavailable)?;
        Ok(row.is_some())
    }
}

#[async_trait]
impl super::UseClaims for SqliteFastState {
    /// The nonce's atomic set-if-absent, under the claim's own key.
    async fn claim_window(&self, key: &str, ttl: Duration) -> Result<bool, FastStateError> {
        super::NonceStore::remember(self, key, ttl).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::fast_state::contract;

    /// A migrated store in a file of its own; the directory is removed by [`Scratch`]'s drop.
    struct Scratch(std::path::PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    async fn open(dir: &std::path::Path) -> SqliteFastState {
        let store = SqliteStore::open(&dir.join("cp.db"), 2).await.unwrap();
        store.migrate().await.unwrap();
        store.fast_state()
    }

    async fn scratch() -> (Scratch, SqliteFastState) {
        let dir = std::env::temp_dir()
            .join("cp-unit-embedded")
            .join(uuid::Uuid::new_v4().simple().to_string());
        let state = open(&dir).await;
        (Scratch(dir), state)
    }

    contract::contract_tests!(async {
        let (dir, state) = scratch().await;
        Some((dir, String::new(), state))
    });

    #[tokio::test]
    async fn records_quotas_and_nonces_outlive_the_pool_that_wrote_them() {
        let (dir, state) = scratch().await;
        let long = Duration::from_secs(600);
        let Claim::Acquired { owner } = state.claim("k", "fp", long).await.unwrap() else {
            panic!("free key")
        };
        state
            .complete(
                HeldKey {
                    key: "k",
                    owner: &owner,
                    fingerprint: "fp",
                },
                b"sealed",
                long,
            )
            .await
            .unwrap();
        state.claim("busy", "fp2", long).await.unwrap();
        state.count_stored("q", 42, long).await.unwrap();
        assert!(state.remember("n", long).await.unwrap());
        state.pool.close().await;
        drop(state);

        let reopened = open(&dir.0).await;
        assert_eq!(
            reopened.claim("k", "other", long).await.unwrap(),
            Claim::Done {
                fingerprint: "fp".into(),
                record: b"sealed".to_vec()
            }
        );
        assert_eq!(
            reopened.claim("busy", "fp2", long).await.unwrap(),
            Claim::InFlight {
                fingerprint: "fp2".into()
            },
            "a claim held when the process stopped keeps its lease"
        );
        assert_eq!(reopened.stored_bytes("q").await.unwrap().0, 42);
        assert!(!reopened.remember("n", long).await.unwrap(), "a replay");
    }

    #[tokio::test]
    async fn expired_rows_are_absent_and_purged() {
        let (_dir, state) = scratch().await;
        let short = Duration::from_millis(1);
        for i in 0..3 {
            state.claim(&format!("k{i}"), "fp", short).await.unwrap();
            state
                .count_stored(&format!("q{i}"), 1, short)
                .await
                .unwrap();
            state.remember(&format!("n{i}"), short).await.unwrap();
        }
        let live = Duration::from_secs(600);
        state.claim("live", "fp", live).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(matches!(
            state.claim("k0", "fp", live).await.unwrap(),
            Claim::Acquired { .. }
        ));
        assert_eq!(state.rows().await, 10, "expired rows linger until a purge");
        assert_eq!(state.purge().await.unwrap(), 8);
        assert_eq!(state.rows().await, 2, "the live claims stay");
        assert!(matches!(
            state.claim("live", "fp", live).await.unwrap(),
            Claim::InFlight { .. }
        ));
    }
}
