//! How far behind the read replica is, looked at every [`EVERY`]: the primary's WAL position,
//! then the replica's replay position. The lag is the age of the oldest primary position the
//! replica has not replayed, so an idle primary never reads as lag and a replica that stopped
//! replaying under writes reads as the time since the first write it missed (within one look).
//! A replica that does not answer, or is not a standby (promoted, or the primary by mistake:
//! it no longer follows), serves nothing until it is one again.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use sqlx::postgres::PgPool;

use super::PostgresSettings;
use crate::storage::records::replica::{ReplicaHealth, ReplicaReads};
use crate::storage::{SharedRecordStore, StoreError};

/// Between two looks at the replica: a quarter second, a small share of a lag limit of 1 s.
const EVERY: Duration = Duration::from_millis(250);
/// Primary positions remembered while the replica lags: ten minutes of looks. Past that the
/// newest are not kept, so a lag older than ten minutes reads as ten minutes or less, still
/// far past any useful limit.
const KEPT: usize = 2_400;
/// A look that takes longer counts as the replica not answering.
const LOOK_TIMEOUT: Duration = Duration::from_secs(1);

/// Opens the replica at `url` (lazily: a replica that is down at start-up is only skipped) and
/// starts watching its lag; reads through the result go to it while it keeps up.
pub fn open_replica(
    url: &str,
    primary: &super::PostgresStore,
    records: SharedRecordStore,
    max_lag: Duration,
    max_connections: u32,
) -> Result<Arc<ReplicaReads>, StoreError> {
    let settings = PostgresSettings {
        max_connections,
        // A replica that does not answer is skipped; a request should not wait long for it.
        acquire_timeout: Duration::from_millis(500),
        ..PostgresSettings::default()
    };
    let replica = super::PostgresStore::connect_lazy(url, &settings)
        .map_err(|_| StoreError::Internal("invalid CP_READ_DATABASE_URL".into()))?;
    let health =
        Arc::new(ReplicaHealth::new(max_lag).map_err(|e| StoreError::Internal(e.to_string()))?);
    watch(
        primary.pool().clone(),
        replica.pool().clone(),
        Arc::downgrade(&health),
    );
    Ok(Arc::new(ReplicaReads::new(
        records,
        Arc::new(replica),
        health,
    )))
}

/// Looks at the replica every [`EVERY`] for as long as `health` is held.
fn watch(primary: PgPool, replica: PgPool, health: Weak<ReplicaHealth>) {
    tokio::spawn(async move {
        let mut unreplayed: VecDeque<(Instant, i64)> = VecDeque::new();
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut warned = false;
        loop {
            ticks.tick().await;
            let Some(health) = health.upgrade() else {
                return;
            };
            let looked = Instant::now();
            // The primary first: whatever it had then, the replica must have replayed.
            let Ok(Ok(written)) = tokio::time::timeout(LOOK_TIMEOUT, wal_position(&primary)).await
            else {
                // The primary is down: every request answers 503 anyway; keep the last finding.
                continue;
            };
            match tokio::time::timeout(LOOK_TIMEOUT, replay_position(&replica)).await {
                Ok(Ok(Some(replayed))) => {
                    warned = false;
                    if unreplayed.len() < KEPT
                        && unreplayed.back().is_none_or(|&(_, lsn)| lsn < written)
                    {
                        unreplayed.push_back((looked, written));
                    }
                    while unreplayed.front().is_some_and(|&(_, lsn)| lsn <= replayed) {
                        unreplayed.pop_front();
                    }
                    let lag = unreplayed
                        .front()
                        .map_or(Duration::ZERO, |&(at, _)| at.elapsed());
                    health.observed(true, lag, written - replayed);
                }
                outcome => {
                    if !warned {
                        match outcome {
                            Ok(Ok(None)) => tracing::warn!(
                                "CP_READ_DATABASE_URL is not a standby (promoted?): reading the primary"
                            ),
                            _ => tracing::warn!(
                                "the read replica does not answer: reading the primary"
                            ),
                        }
                        warned = true;
                    }
                    unreplayed.clear();
                    health.observed(false, Duration::ZERO, 0);
                }
            }
        }
    });
}

async fn wal_position(primary: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
        .fetch_one(primary)
        .await
}

/// The replica's replay position, or `None` when it is not a standby.
async fn replay_position(replica: &PgPool) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT CASE WHEN pg_is_in_recovery()
                THEN pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::bigint END",
    )
    .fetch_one(replica)
    .await
}
