//! Audit reads from a streaming replica (`CP_READ_DATABASE_URL`): activity pages below a
//! cursor and stream replays, and only when the replica's answer is the primary's. A page below
//! a cursor must begin right below it (events are numbered without gaps, so it then holds every
//! event the primary would); a replay page must be full (a short one may lack what the primary
//! has, and the stream would wait for an event already announced). A first page (no cursor)
//! always reads the primary, so a client reads its own write at once. Everything else, and every
//! read while the replica lags past the limit, is down or fails a read, goes to the primary. The
//! lag is measured by the adapter (`postgres/replica.rs`); docs/decisions.md says why these
//! reads and no others.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use prometheus::{Gauge, IntCounterVec, IntGauge, Opts};
use uuid::Uuid;

use crate::domain::AuditEvent;
use crate::storage::{AuditStore, SharedRecordStore, StoreError};

/// Longest wait for one replica read: a page takes about a millisecond there, a full replay
/// page a few; a second means it is not answering.
const REPLICA_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether the replica may serve, as its monitor last saw it, and what it served.
pub struct ReplicaHealth {
    max_lag: Duration,
    up: AtomicBool,
    lag_ms: AtomicU64,
    lag_gauge: Gauge,
    lag_bytes: IntGauge,
    available: IntGauge,
    reads: IntCounterVec,
}

/// What `/readyz` says of the replica.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplicaStatus {
    /// Serving reads: answering, a standby, and within the lag limit.
    pub available: bool,
    pub up: bool,
    /// `None` while unknown (a replica not yet seen to replay a position the primary had):
    /// older than any limit.
    pub lag: Option<Duration>,
    pub max_lag: Duration,
}

/// Why a read went where it went (`replica_reads_total{outcome}`).
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Answered by the replica.
    Served,
    /// The replica's answer was not provably the primary's: read again there.
    Behind,
    /// The replica was down or lagging past the limit: not asked.
    Skipped,
    /// The replica failed the read: read again on the primary.
    Failed,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Self::Served => "served",
            Self::Behind => "behind",
            Self::Skipped => "skipped",
            Self::Failed => "failed",
        }
    }
}

impl ReplicaHealth {
    pub fn new(max_lag: Duration) -> Result<Self, prometheus::Error> {
        Ok(Self {
            max_lag,
            // Not until the monitor's first look.
            up: AtomicBool::new(false),
            lag_ms: AtomicU64::new(u64::MAX),
            lag_gauge: Gauge::new(
                "db_replica_lag_seconds",
                "How long ago the oldest write the read replica has not applied was made (+Inf: unknown)",
            )?,
            lag_bytes: IntGauge::new(
                "db_replica_lag_bytes",
                "WAL the read replica has not applied",
            )?,
            available: IntGauge::new(
                "db_replica_available",
                "1 while the read replica serves reads (answering, a standby, within the lag limit)",
            )?,
            reads: IntCounterVec::new(
                Opts::new(
                    "replica_reads_total",
                    "Activity and replay reads by where they were answered: served by the replica, or by the primary because it was behind, skipped or failed",
                ),
                &["outcome"],
            )?,
        })
    }

    pub fn status(&self) -> ReplicaStatus {
        let up = self.up.load(Ordering::Relaxed);
        let lag = match self.lag_ms.load(Ordering::Relaxed) {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms)),
        };
        ReplicaStatus {
            available: up && lag.is_some_and(|lag| lag <= self.max_lag),
            up,
            lag,
            max_lag: self.max_lag,
        }
    }

    /// The monitor's finding: answering as a standby `lag` behind (`None`: unknown, older
    /// than any limit) with `bytes` of WAL not replayed (`None`: not measured this time), or
    /// not answering.
    pub(in crate::storage::records) fn observed(
        &self,
        up: bool,
        lag: Option<Duration>,
        bytes: Option<i64>,
    ) {
        let was_available = self.status().available;
        self.up.store(up, Ordering::Relaxed);
        let ms = lag.map_or(u64::MAX, |lag| {
            u64::try_from(lag.as_millis()).unwrap_or(u64::MAX - 1)
        });
        self.lag_ms.store(ms, Ordering::Relaxed);
        self.lag_gauge
            .set(lag.map_or(f64::INFINITY, |lag| lag.as_secs_f64()));
        if let Some(bytes) = bytes {
            self.lag_bytes.set(bytes.max(0));
        }
        let available = self.status().available;
        self.available.set(i64::from(available));
        if was_available != available {
            tracing::info!(available, up, lag_ms = ms, "read replica");
        }
    }

    fn count(&self, outcome: Outcome) {
        self.reads.with_label_values(&[outcome.label()]).inc();
    }

    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.lag_gauge.clone()),
            Box::new(self.lag_bytes.clone()),
            Box::new(self.available.clone()),
            Box::new(self.reads.clone()),
        ]
    }
}

/// The audit port with its two reads routed (module doc); writes and `settle_events` go to the
/// primary.
pub struct ReplicaReads {
    primary: SharedRecordStore,
    replica: Arc<dyn AuditStore>,
    health: Arc<ReplicaHealth>,
}

impl ReplicaReads {
    pub fn new(
        primary: SharedRecordStore,
        replica: Arc<dyn AuditStore>,
        health: Arc<ReplicaHealth>,
    ) -> Self {
        Self {
            primary,
            replica,
            health,
        }
    }

    pub fn health(&self) -> &Arc<ReplicaHealth> {
        &self.health
    }

    /// The replica's answer when it may serve and `complete` accepts it; `None` sends the read
    /// to the primary.
    async fn ask_replica(
        &self,
        read: impl Future<Output = Result<Vec<AuditEvent>, StoreError>>,
        complete: impl FnOnce(&[AuditEvent]) -> bool,
    ) -> Option<Vec<AuditEvent>> {
        if !self.health.status().available {
            self.health.count(Outcome::Skipped);
            return None;
        }
        // A replica that drops packets instead of refusing them must not hold the reader: past
        // this the read is abandoned (its connection with it) and the primary answers.
        let read = match tokio::time::timeout(REPLICA_READ_TIMEOUT, read).await {
            Ok(read) => read,
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {} ms",
                REPLICA_READ_TIMEOUT.as_millis()
            ))),
        };
        match read {
            Ok(events) if complete(&events) => {
                self.health.count(Outcome::Served);
                Some(events)
            }
            Ok(_) => {
                self.health.count(Outcome::Behind);
                None
            }
            Err(e) => {
                // Skipped until the monitor sees it answer again (a quarter second).
                tracing::warn!(error = %e, "the read replica failed a read; reading the primary");
                self.health.up.store(false, Ordering::Relaxed);
                self.health.available.set(0);
                self.health.count(Outcome::Failed);
                None
            }
        }
    }
}

/// Whether a page read below `before` is the primary's: it begins right below the cursor.
fn begins_below(before: i64, events: &[AuditEvent]) -> bool {
    events.first().and_then(|e| e.sequence) == Some(before - 1)
}

#[async_trait]
impl AuditStore for ReplicaReads {
    async fn list_events(
        &self,
        workspace_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        // A first page is the primary's: a client reads its own write at once.
        if let Some(cursor) = before {
            let replica = self.replica.list_events(workspace_id, before, limit);
            if let Some(events) = self
                .ask_replica(replica, |events| begins_below(cursor, events))
                .await
            {
                return Ok(events);
            }
        }
        self.primary.list_events(workspace_id, before, limit).await
    }

    async fn events_after(
        &self,
        workspace_id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let replica = self.replica.events_after(workspace_id, after, limit);
        if let Some(events) = self
            .ask_replica(replica, |events| events.len() == limit as usize)
            .await
        {
            return Ok(events);
        }
        self.primary.events_after(workspace_id, after, limit).await
    }

    async fn settle_events(&self) -> Result<(), StoreError> {
        self.primary.settle_events().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence: i64) -> AuditEvent {
        AuditEvent {
            id: Uuid::new_v4(),
            organisation_id: Uuid::new_v4(),
            workspace_id: None,
            sequence: Some(sequence),
            event_type: "test".into(),
            actor_kind: "system".into(),
            actor_id: None,
            actor_token_id: None,
            target_kind: "test".into(),
            target_id: Uuid::new_v4(),
            correlation_id: String::new(),
            occurred_at: chrono::Utc::now(),
            data: serde_json::value::RawValue::from_string("{}".into()).unwrap(),
        }
    }

    #[test]
    fn a_page_below_a_cursor_must_begin_right_below_it() {
        assert!(begins_below(10, &[event(9), event(8)]));
        // The replica has not applied 9 yet: the primary answers.
        assert!(!begins_below(10, &[event(8), event(7)]));
        assert!(!begins_below(10, &[]));
    }

    #[test]
    fn the_replica_serves_only_within_a_known_lag_limit() {
        let health = ReplicaHealth::new(Duration::from_millis(500)).unwrap();
        assert!(!health.status().available, "not before the first look");
        health.observed(true, Some(Duration::from_millis(200)), Some(10));
        assert!(health.status().available);
        health.observed(true, Some(Duration::from_millis(501)), Some(10));
        assert!(!health.status().available);
        health.observed(true, None, None);
        assert!(
            !health.status().available,
            "an unknown lag is past any limit"
        );
        health.observed(false, Some(Duration::ZERO), Some(0));
        assert!(!health.status().available);
    }
}
