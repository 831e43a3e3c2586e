//! The policy decision log (docs/operations.md, "Policy decision logs and metrics"), modelled on OPA's.
//!
//! The policy runtime offers each decision to [`DecisionRecorder`] on the request's path. The
//! recorder keeps every decision that is not routine (deny, hold, reject, hide, failure) and a
//! sample ([`DecisionLogSettings::sample`]) of the routine ones (allow, publish), and offers it
//! to a [`BatchQueue`]: a full queue drops the decision and counts it in
//! `policy_decisions_dropped_total`, so logging never delays nor fails a request. The queue's
//! writer puts each batch in one transaction, and after each batch (and at least once a minute)
//! prunes the log to its row count and age. The log is one for the
//! deployment, not one per organisation (docs/decisions.md).

use std::sync::Arc;
use std::time::Duration;

use super::batch_queue::{BatchQueue, BatchWriter, QueueShape};
use super::directory::{AdminPage, Paged};
use super::policies::paged;
use super::{Operation, ServiceError, Services};
use crate::domain::{FieldError, Principal, SampleRate, Span};
use crate::policy::{DecisionEvent, DecisionLog, DecisionOutcome};
use crate::storage::{
    DecisionBounds, DecisionFilter, PolicyDecisionRecord, SharedRecordStore, WriteContext,
};
use chrono::{DateTime, Utc};
use prometheus::IntCounter;

/// Up to 4,096 decisions wait for the writer, 256 are written in one transaction, and the log is
/// pruned at least once a minute, even when nothing is written.
const QUEUE: QueueShape = QueueShape {
    capacity: 4096,
    batch: 256,
    tick: Some(Duration::from_secs(60)),
};
/// Rows one listing returns at most.
pub const DECISION_LIST_MAX: u32 = 1000;

/// How much the log keeps.
#[derive(Debug, Clone, Copy)]
pub struct DecisionLogSettings {
    /// The fraction of routine decisions kept.
    pub sample: SampleRate,
    pub max_rows: u64,
    pub max_age: Span,
}

/// Samples and queues decisions, and runs the writer (see the module documentation).
pub struct DecisionRecorder {
    queue: BatchQueue<PolicyDecisionRecord>,
    sample: SampleRate,
    dropped: IntCounter,
    written: IntCounter,
}

impl DecisionRecorder {
    /// Starts the writer task; it stops when the recorder is dropped.
    pub fn start(
        store: SharedRecordStore,
        settings: DecisionLogSettings,
    ) -> Result<Arc<Self>, prometheus::Error> {
        let dropped = IntCounter::new(
            "policy_decisions_dropped_total",
            "Policy decisions not logged because the decision log's queue was full",
        )?;
        let written = IntCounter::new(
            "policy_decisions_logged_total",
            "Policy decisions this process wrote to the decision log",
        )?;
        let writer = Writer {
            store,
            settings,
            written: written.clone(),
        };
        let queue = BatchQueue::start(QUEUE, dropped.clone(), writer);
        Ok(Arc::new(Self {
            queue,
            sample: settings.sample,
            dropped,
            written,
        }))
    }
}

impl DecisionLog for DecisionRecorder {
    fn keeps(&self, outcome: DecisionOutcome) -> bool {
        !outcome.is_routine() || self.sample.keeps()
    }

    fn record(&self, event: DecisionEvent) {
        self.queue.offer(stored(event));
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.dropped.clone()),
            Box::new(self.written.clone()),
        ]
    }
}

fn stored(e: DecisionEvent) -> PolicyDecisionRecord {
    PolicyDecisionRecord {
        // As the store keeps it (microseconds), so a listing shows what was recorded.
        occurred_at: DateTime::from_timestamp_micros(e.at.timestamp_micros()).unwrap_or(e.at),
        kind: e.kind.as_str().to_owned(),
        operation: e.operation,
        outcome: e.outcome.as_str().to_owned(),
        failure: e.failure.map(str::to_owned),
        reason: e.reason,
        policy_name: e.policy.name().to_owned(),
        policy_version: e.policy.version(),
        policy_digest: e.digest,
        latency_us: i64::try_from(e.latency.as_micros()).unwrap_or(i64::MAX),
        correlation_id: e.correlation_id.map(|c| c.as_str().to_owned()),
        organisation_id: e.organisation_id,
        workspace_id: e.workspace_id,
    }
}

/// The task that writes queued decisions and prunes the log.
struct Writer {
    store: SharedRecordStore,
    settings: DecisionLogSettings,
    written: IntCounter,
}

#[async_trait::async_trait]
impl BatchWriter<PolicyDecisionRecord> for Writer {
    async fn write(&mut self, batch: &mut Vec<PolicyDecisionRecord>) {
        match self
            .store
            .insert_decisions(&WriteContext::system(), batch)
            .await
        {
            Ok(written) => self.written.inc_by(written),
            Err(e) => tracing::warn!(
                error = %e,
                decisions = batch.len(),
                "could not write policy decisions"
            ),
        }
    }

    async fn after(&mut self) {
        self.prune().await;
    }
}

impl Writer {
    async fn prune(&self) {
        let bounds = DecisionBounds {
            max_rows: self.settings.max_rows,
            older_than: Utc::now() - self.settings.max_age.duration(),
        };
        if let Err(e) = self.store.prune_decisions(bounds).await {
            tracing::warn!(error = %e, "could not prune the policy decision log");
        }
    }
}

/// Which decisions a listing asks for (`cpctl policies decisions`); every filter narrows it.
#[derive(Debug, Clone)]
pub struct DecisionListing {
    pub since: Option<DateTime<Utc>>,
    pub operation: Option<String>,
    pub outcome: Option<DecisionOutcome>,
    /// 1 to [`DECISION_LIST_MAX`].
    pub limit: u32,
}

/// A page's cursor: the last decision's time (microseconds) and id, `<micros>.<id>`.
fn decision_cursor(at: &DateTime<Utc>, id: i64) -> String {
    format!("{}.{id}", at.timestamp_micros())
}

/// A decision page's cursor, as [`decision_cursor`] writes it: the last decision's time in
/// Unix microseconds (16 digits reach past the year 2200), a dot, and its id; or empty (the
/// same as absent). The document states it as written.
pub const DECISION_CURSOR_PATTERN: &str = "^([0-9]{1,16}[.][0-9]{1,18})?$";

fn parse_decision_cursor(raw: &str) -> Option<(DateTime<Utc>, i64)> {
    let (micros, id) = raw.split_once('.')?;
    let digits =
        |s: &str, max: usize| (1..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(micros, 16) || !digits(id, 18) {
        return None;
    }
    let at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
    Some((at, id.parse().ok()?))
}

impl Services {
    /// Logged decisions, newest first; the store does the filtering.
    pub async fn list_policy_decisions(
        &self,
        listing: &DecisionListing,
    ) -> Result<Vec<PolicyDecisionRecord>, ServiceError> {
        let filter = DecisionFilter {
            since: listing.since,
            operation: listing.operation.clone(),
            outcome: listing.outcome.map(|o| o.as_str().to_owned()),
            before: None,
            limit: listing.limit.clamp(1, DECISION_LIST_MAX),
        };
        let rows = self.store.list_decisions(&filter).await?;
        Ok(rows.into_iter().map(|(_, d)| d).collect())
    }

    /// A page of the decision log, newest first, for an operator (the log is the
    /// deployment's, not an organisation's).
    pub async fn admin_list_policy_decisions(
        &self,
        principal: &Principal,
        listing: &DecisionListing,
        page: AdminPage,
        cursor: Option<&str>,
    ) -> Result<Paged<PolicyDecisionRecord>, ServiceError> {
        self.authorize(principal, Operation::ListPolicyDecisions, None, vec![])
            .await?;
        let before = match cursor.filter(|c| !c.is_empty()) {
            None => None,
            Some(c) => Some(parse_decision_cursor(c).ok_or_else(|| {
                ServiceError::Validation(
                    FieldError::new("cursor", "is not a cursor this server issued").into(),
                )
            })?),
        };
        let filter = DecisionFilter {
            since: listing.since,
            operation: listing.operation.clone(),
            outcome: listing.outcome.map(|o| o.as_str().to_owned()),
            before,
            limit: page.fetch(),
        };
        let rows = self.store.list_decisions(&filter).await?;
        let page = paged(page, rows, |(id, d)| decision_cursor(&d.occurred_at, *id));
        Ok(Paged {
            items: page.items.into_iter().map(|(_, d)| d).collect(),
            next_cursor: page.next_cursor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parser takes what the cursor writer writes, and only digits around one dot.
    #[test]
    fn a_decision_cursor_is_what_the_pattern_says() {
        let at = DateTime::from_timestamp_micros(1_767_225_600_123_456).expect("time");
        let cursor = decision_cursor(&at, 42);
        assert_eq!(parse_decision_cursor(&cursor), Some((at, 42)));
        for refused in [
            "+1.2",
            "-1.2",
            "1.+2",
            "1.",
            ".1",
            "1",
            "1.2.3",
            " 1.2",
            "12345678901234567.1",
        ] {
            assert!(parse_decision_cursor(refused).is_none(), "{refused}");
        }
        assert!(parse_decision_cursor("9999999999999999.999999999999999999").is_some());
    }
}
