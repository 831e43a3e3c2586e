//! How far behind the read replica is, looked at every [`EVERY`]: the primary's WAL position,
//! then the replica's replay position. The lag is the age of the oldest primary position the
//! replica has not replayed, so an idle primary never reads as lag and a replica that stopped
//! replaying under writes reads as the time since the first write it missed (within one look).
//! Where the age cannot be known it is taken as past any limit: a position first seen before
//! the replica was seen to catch up (at start-up, after it stopped answering) has no age, and
//! while the primary does not answer the lag is counted from the last time it did. A replica
//! that does not answer, or is not a standby of this primary (promoted, the primary by mistake,
//! or a standby of another cluster, told by `system_identifier`), serves nothing until it is one
//! again.

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
/// newest position replaces the last one kept, keeping its older time: the lag may read
/// longer than it is, never shorter.
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
        // Primary positions not yet replayed, oldest first, each with when it was seen (`None`:
        // seen before the replica was known to have caught up; its age is unknown).
        let mut unreplayed: VecDeque<(Option<Instant>, i64)> = VecDeque::new();
        // Whether the replica has been seen to replay every position seen so far.
        let mut known = false;
        let mut primary_seen = Instant::now();
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut warned = false;
        let mut cluster = SameCluster::default();
        loop {
            ticks.tick().await;
            let Some(health) = health.upgrade() else {
                return;
            };
            let looked = Instant::now();
            // The primary first: whatever it had then, the replica must have replayed.
            let written = tokio::time::timeout(LOOK_TIMEOUT, wal_position(&primary))
                .await
                .ok()
                .and_then(Result::ok);
            let mut look = match tokio::time::timeout(LOOK_TIMEOUT, replay_position(&replica)).await
            {
                Ok(Ok(Some(replayed))) => Ok(replayed),
                Ok(Ok(None)) => Err(NotStandby),
                _ => Err(Silent),
            };
            if look.is_ok() && !cluster.follows(&primary, &replica).await {
                look = Err(Foreign);
            }
            if look.is_err() {
                cluster.forget();
            }
            match look {
                Ok(replayed) => {
                    warned = false;
                    if let Some(written) = written {
                        primary_seen = looked;
                        let at = known.then_some(looked);
                        let full = unreplayed.len() >= KEPT;
                        match unreplayed.back_mut() {
                            Some((_, lsn)) if *lsn >= written => {}
                            Some((_, lsn)) if full => *lsn = written,
                            _ => unreplayed.push_back((at, written)),
                        }
                    }
                    while unreplayed.front().is_some_and(|&(_, lsn)| lsn <= replayed) {
                        unreplayed.pop_front();
                    }
                    known |= unreplayed.is_empty() && written.is_some();
                    let lag = match unreplayed.front() {
                        Some(&(Some(at), _)) => Some(at.elapsed()),
                        Some(&(None, _)) => None,
                        None if !known => None,
                        // Caught up with the primary as last seen; what it wrote since is
                        // unknown while it does not answer.
                        None if written.is_none() => Some(primary_seen.elapsed()),
                        None => Some(Duration::ZERO),
                    };
                    health.observed(true, lag, written.map(|w| w - replayed));
                }
                Err(why) => {
                    if !warned {
                        match why {
                            NotStandby => tracing::warn!(
                                "CP_READ_DATABASE_URL is not a standby (promoted?): reading the primary"
                            ),
                            Foreign => tracing::warn!(
                                "CP_READ_DATABASE_URL is a standby of another cluster than DATABASE_URL \
                                 (system_identifier differs): reading the primary"
                            ),
                            Silent => tracing::warn!(
                                "the read replica does not answer: reading the primary"
                            ),
                        }
                        warned = true;
                    }
                    unreplayed.clear();
                    known = false;
                    health.observed(false, None, None);
                }
            }
        }
    });
}

/// Why a look found no replica to read.
enum Unusable {
    NotStandby,
    /// A standby, of another cluster.
    Foreign,
    Silent,
}
use Unusable::*;

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

/// Whether the replica follows this primary's cluster (a standby of another has LSNs that mean
/// nothing here): asked once per spell of answers, as a replica can only be swapped while it
/// does not answer.
#[derive(Default)]
struct SameCluster {
    checked: bool,
    unchecked_warned: bool,
}

impl SameCluster {
    /// False only for a standby of another cluster.
    async fn follows(&mut self, primary: &PgPool, replica: &PgPool) -> bool {
        if self.checked {
            return true;
        }
        match clusters(primary, replica).await {
            Some((ours, theirs)) if ours != theirs => return false,
            Some(_) => {}
            // pg_control_system() revoked (some managed databases): serve unchecked rather
            // than never.
            None if !self.unchecked_warned => {
                tracing::warn!(
                    "cannot read system_identifier on DATABASE_URL or CP_READ_DATABASE_URL: \
                     not checking that the replica follows this primary"
                );
                self.unchecked_warned = true;
            }
            None => {}
        }
        self.checked = true;
        true
    }

    fn forget(&mut self) {
        self.checked = false;
    }
}

/// The clusters (`system_identifier`) of the primary and the replica; `None` when either
/// cannot be read.
async fn clusters(primary: &PgPool, replica: &PgPool) -> Option<(i64, i64)> {
    async fn cluster(pool: &PgPool) -> Option<i64> {
        let read =
            sqlx::query_scalar("SELECT system_identifier FROM pg_control_system()").fetch_one(pool);
        tokio::time::timeout(LOOK_TIMEOUT, read).await.ok()?.ok()
    }
    Some((cluster(primary).await?, cluster(replica).await?))
}
