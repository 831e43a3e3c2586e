//! The audit log's integrity: verifying a workspace's hash chain, exporting its
//! events, and retention (an organisation keeps its events for a set time; older ones are
//! removed in small batches behind a checkpoint the chain restarts from). The chain itself is
//! `domain/audit_chain.rs`; it is written where sequences are given (the Postgres numbering
//! pass, SQLite's insert).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use super::admin::admin_event;
use super::{ServiceError, Services};
use crate::domain::{AuditEvent, CorrelationId, GENESIS_HASH, Span, chain_hash};
use crate::storage::{AuditHead, ChainedEvent, RecordStore, StoreError, TimeWindow, WriteContext};

/// Events read per page while walking a chain or exporting.
pub const AUDIT_PAGE: u32 = 1000;
/// Events retention removes in one transaction.
pub const RETENTION_BATCH: u32 = 500;
/// Batches one retention pass runs per workspace at most; the next pass goes on.
const RETENTION_BATCHES_PER_PASS: usize = 20;

/// What is wrong with a chain, at the first event where it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainProblem {
    /// The event at this sequence is not the one that was chained there (its content changed).
    Changed,
    /// The event at this sequence is missing.
    Deleted,
    /// An event was put in at this sequence, the ones after it renumbered.
    Inserted,
    /// The event chained at this sequence now sits at another one.
    Reordered,
}

impl ChainProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Changed => "changed",
            Self::Deleted => "deleted",
            Self::Inserted => "inserted",
            Self::Reordered => "reordered",
        }
    }
}

/// The first break in a chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainBreak {
    pub problem: ChainProblem,
    pub sequence: i64,
    /// For `reordered`: where the event chained at `sequence` is now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found_at: Option<i64>,
}

/// What verifying a workspace's chain found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainReport {
    pub workspace_id: Uuid,
    /// The chain was verified after this sequence (a checkpoint's; 0 from the start).
    pub checkpoint_seq: i64,
    /// The workspace's last sequence when the walk began.
    pub head_seq: i64,
    /// Events whose hash matched, in order, before any break.
    pub verified: u64,
    pub broken: Option<ChainBreak>,
}

impl ChainReport {
    pub fn intact(&self) -> bool {
        self.broken.is_none()
    }
}

fn unhashable(e: crate::domain::UnhashableEvent) -> StoreError {
    StoreError::Internal(e.to_string())
}

/// Whether `event`, moved to `seq`, is the one chained there after `prev`.
fn belongs_at(prev: &[u8], seq: i64, event: &ChainedEvent) -> bool {
    let mut moved = event.event.clone();
    moved.sequence = Some(seq);
    match (chain_hash(prev, &moved), &event.hash) {
        (Ok(hash), Some(stored)) => hash[..] == stored[..],
        _ => false,
    }
}

/// Names the break at `window[0]`, the first event whose hash does not follow `prev`; `window`
/// holds the events from it on.
fn classify(prev: &[u8], window: &[ChainedEvent]) -> ChainBreak {
    let here = &window[0];
    let seq = here.event.sequence.unwrap_or_default();
    // The event chained at `seq`, if it is still in the log somewhere after.
    let moved = window[1..].iter().find(|e| belongs_at(prev, seq, e));
    let Some(moved) = moved else {
        return ChainBreak {
            problem: ChainProblem::Changed,
            sequence: seq,
            found_at: None,
        };
    };
    let found_at = moved.event.sequence.unwrap_or_default();
    // It moved one up: `here` either came from just after it (two swapped) or was put in.
    let swapped = found_at != seq + 1
        || moved
            .hash
            .as_deref()
            .is_some_and(|chained| belongs_at(chained, seq + 1, here));
    ChainBreak {
        problem: if swapped {
            ChainProblem::Reordered
        } else {
            ChainProblem::Inserted
        },
        sequence: seq,
        found_at: swapped.then_some(found_at),
    }
}

/// Walks a workspace's chain from its latest checkpoint to its head, page by page, and stops
/// at the first event that does not follow. `None` when there is no such workspace.
///
/// A retention batch that commits during the walk removes events it has yet to read, which
/// looks like a deletion; a break found while the checkpoint moved is walked again from the
/// new checkpoint (three walks at most: a batch takes well under a walk's time).
pub async fn verify_chain(
    store: &dyn RecordStore,
    workspace_id: Uuid,
) -> Result<Option<ChainReport>, StoreError> {
    let mut walks = 0;
    loop {
        let Some(head) = store.audit_head(workspace_id).await? else {
            return Ok(None);
        };
        let report = walk_chain(store, workspace_id, head).await?;
        walks += 1;
        let moved = || async {
            let now = store.latest_checkpoint(workspace_id).await?;
            Ok::<_, StoreError>(now.map_or(0, |c| c.last_seq) != report.checkpoint_seq)
        };
        if report.broken.is_none() || walks == 3 || !moved().await? {
            return Ok(Some(report));
        }
    }
}

async fn walk_chain(
    store: &dyn RecordStore,
    workspace_id: Uuid,
    head: AuditHead,
) -> Result<ChainReport, StoreError> {
    let checkpoint = store.latest_checkpoint(workspace_id).await?;
    let checkpoint_seq = checkpoint.as_ref().map_or(0, |c| c.last_seq);
    let mut prev = checkpoint
        .and_then(|c| c.hash)
        .unwrap_or_else(|| GENESIS_HASH.to_vec());
    let mut report = ChainReport {
        workspace_id,
        checkpoint_seq,
        head_seq: head.seq,
        verified: 0,
        broken: None,
    };
    let mut expected = checkpoint_seq + 1;
    'pages: while expected <= head.seq {
        let page = store
            .chained_events(workspace_id, expected - 1, AUDIT_PAGE)
            .await?;
        if page.is_empty() {
            break;
        }
        for (i, event) in page.iter().enumerate() {
            let seq = event.event.sequence.unwrap_or_default();
            if seq > head.seq {
                break 'pages;
            }
            if seq != expected {
                break 'pages;
            }
            let hash = chain_hash(&prev, &event.event).map_err(unhashable)?;
            if event.hash.as_deref() == Some(&hash[..]) {
                prev = hash.to_vec();
                expected += 1;
                report.verified += 1;
                continue;
            }
            let mut window = page[i..].to_vec();
            if window.len() < AUDIT_PAGE as usize {
                let last = window.last().and_then(|e| e.event.sequence).unwrap_or(seq);
                window.extend(store.chained_events(workspace_id, last, AUDIT_PAGE).await?);
            }
            report.broken = Some(classify(&prev, &window));
            return Ok(report);
        }
    }
    if expected <= head.seq {
        // A sequence the workspace handed out is not in the log.
        report.broken = Some(ChainBreak {
            problem: ChainProblem::Deleted,
            sequence: expected,
            found_at: None,
        });
    }
    Ok(report)
}

impl Services {
    /// `cpctl audit verify`: the workspace's chain, checked from its latest checkpoint.
    pub async fn verify_audit_chain(
        &self,
        workspace_id: Uuid,
    ) -> Result<ChainReport, ServiceError> {
        verify_chain(self.store.as_ref(), workspace_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such workspace"))
    }

    /// One page of `cpctl audit export`: events after `after` within `window`, oldest first.
    pub async fn export_audit_page(
        &self,
        workspace_id: Uuid,
        after: i64,
        window: TimeWindow,
    ) -> Result<Vec<AuditEvent>, ServiceError> {
        if after == 0 && self.store.audit_head(workspace_id).await?.is_none() {
            return Err(ServiceError::not_found("no such workspace"));
        }
        Ok(self
            .store
            .export_events(workspace_id, after, window, AUDIT_PAGE)
            .await?)
    }

    /// `cpctl audit retention ORG SPAN|none`: how long an organisation keeps its audit events.
    pub async fn set_audit_retention(
        &self,
        organisation_id: Uuid,
        retention: Option<Span>,
        cid: &CorrelationId,
    ) -> Result<(), ServiceError> {
        if retention.is_some_and(Span::is_zero) {
            return Err(ServiceError::Validation(
                crate::domain::FieldError::new("retention", "must be longer than 0s, or none")
                    .into(),
            ));
        }
        let seconds = retention.map(Span::seconds);
        let event = admin_event(
            organisation_id,
            None,
            "organisation.audit_retention_set",
            "organisation",
            organisation_id,
            cid,
            json!({ "retentionSeconds": seconds }),
        );
        let found = self
            .store
            .set_audit_retention(&WriteContext::admin(cid), organisation_id, seconds, &event)
            .await?;
        if !found {
            return Err(ServiceError::not_found("no such organisation"));
        }
        Ok(())
    }

    /// One retention pass (the background task's): removes every workspace's events older
    /// than its organisation's retention, in batches of [`RETENTION_BATCH`] per transaction.
    /// Returns how many events it removed.
    pub async fn purge_expired_audit(&self, now: DateTime<Utc>) -> Result<u64, ServiceError> {
        let mut removed = 0;
        for (workspace_id, seconds) in self.store.retention_workspaces().await? {
            let cutoff = now - chrono::Duration::seconds(seconds);
            for _ in 0..RETENTION_BATCHES_PER_PASS {
                let n = self
                    .store
                    .remove_expired_events(workspace_id, cutoff, RETENTION_BATCH, now)
                    .await?;
                removed += n;
                if n < u64::from(RETENTION_BATCH) {
                    break;
                }
            }
        }
        Ok(removed)
    }
}
