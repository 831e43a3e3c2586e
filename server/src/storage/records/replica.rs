//! Audit reads from a streaming replica (`CP_READ_DATABASE_URL`): activity pages and stream
//! replays, and nothing else. A replica's answer is used only when it is the primary's, or
//! bounded-stale where no reader can tell: a page below a cursor must begin right below it (its
//! events are numbered without gaps, so then it holds every one), a replay page must be full
//! (a short one may lack what the primary has, and the stream would wait for an event already
//! announced), and a first page is the replica's view, at most the lag limit old. Anything
//! else, a replica that lags past the limit, is down or fails a read, is answered by the
//! primary. The lag is measured by the adapter (`postgres/replica.rs`); docs/decisions.md says
//! why these reads and no others.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use prometheus::{Gauge, IntCounterVec, IntGauge, Opts};
use uuid::Uuid;

use crate::domain::AuditEvent;
use crate::storage::{AuditStore, SharedRecordStore, StoreError};

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
    pub lag: Duration,
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
            lag_ms: AtomicU64::new(0),
            lag_gauge: Gauge::new(
                "db_replica_lag_seconds",
                "How long ago the oldest write the read replica has not applied was made",
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
        let lag = Duration::from_millis(self.lag_ms.load(Ordering::Relaxed));
        ReplicaStatus {
            available: up && lag <= self.max_lag,
            up,
            lag,
            max_lag: self.max_lag,
        }
    }

    /// The monitor's finding: answering as a standby `lag` behind (`bytes` of WAL), or not.
    pub(in crate::storage::records) fn observed(&self, up: bool, lag: Duration, bytes: i64) {
        let was_available = self.status().available;
        self.up.store(up, Ordering::Relaxed);
        self.lag_ms.store(
            lag.as_millis().try_into().unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.lag_gauge.set(lag.as_secs_f64());
        self.lag_bytes.set(bytes.max(0));
        let available = self.status().available;
        self.available.set(i64::from(available));
        if was_available != available {
            tracing::info!(
                available,
                up,
                lag_ms = lag.as_millis() as u64,
                "read replica"
            );
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
        match read.await {
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
fn page_is_complete(before: Option<i64>, events: &[AuditEvent]) -> bool {
    match before {
        None => true,
        Some(before) => events.first().and_then(|e| e.sequence) == Some(before - 1),
    }
}

#[async_trait]
impl AuditStore for ReplicaReads {
    async fn list_events(
        &self,
        workspace_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let replica = self.replica.list_events(workspace_id, before, limit);
        if let Some(events) = self
            .ask_replica(replica, |events| page_is_complete(before, events))
            .await
        {
            return Ok(events);
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
            target_kind: "test".into(),
            target_id: Uuid::new_v4(),
            correlation_id: String::new(),
            occurred_at: chrono::Utc::now(),
            data: serde_json::value::RawValue::from_string("{}".into()).unwrap(),
        }
    }

    #[test]
    fn a_page_below_a_cursor_must_begin_right_below_it() {
        assert!(page_is_complete(None, &[]));
        assert!(page_is_complete(Some(10), &[event(9), event(8)]));
        // The replica has not applied 9 yet: the primary answers.
        assert!(!page_is_complete(Some(10), &[event(8), event(7)]));
        assert!(!page_is_complete(Some(10), &[]));
    }

    #[test]
    fn the_replica_serves_only_within_the_lag_limit() {
        let health = ReplicaHealth::new(Duration::from_millis(500)).unwrap();
        assert!(!health.status().available, "not before the first look");
        health.observed(true, Duration::from_millis(200), 10);
        assert!(health.status().available);
        health.observed(true, Duration::from_millis(501), 10);
        assert!(!health.status().available);
        health.observed(false, Duration::ZERO, 0);
        assert!(!health.status().available);
    }
}
