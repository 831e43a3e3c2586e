//! The audit stream: a workspace's durable log from a sequence on, then its live events.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{Operation, ServiceError, Services};
use crate::domain::{AuditEvent, FieldError, Principal, ValidationErrors};
use crate::storage::SharedRecordStore;

/// Where a stream starts and which event types it carries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamRequest {
    /// Replay events with a sequence above this; `None`: only events from now on.
    pub after: Option<i64>,
    /// Only these types; empty means all.
    pub types: Vec<String>,
}

impl StreamRequest {
    /// `Last-Event-ID` wins over `?after=` (a reconnecting browser sends the header).
    pub fn parse(
        last_event_id: Option<&str>,
        after: Option<&str>,
        types: Option<&str>,
    ) -> Result<Self, ValidationErrors> {
        let parse_seq = |field: &str, raw: &str| {
            raw.trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| FieldError::new(field, "must be a non-negative integer sequence"))
        };
        let after = match (last_event_id, after) {
            (Some(raw), _) => Some(parse_seq("Last-Event-ID", raw)?),
            (None, Some(raw)) => Some(parse_seq("after", raw)?),
            (None, None) => None,
        };
        let types: Vec<String> = types
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        if types.len() > 50 || types.iter().any(|t| t.len() > 100) {
            return Err(
                FieldError::new("types", "at most 50 types of at most 100 characters").into(),
            );
        }
        Ok(Self { after, types })
    }
}

struct Cursor {
    store: SharedRecordStore,
    rx: broadcast::Receiver<Arc<AuditEvent>>,
    workspace_id: Uuid,
    /// The newest sequence passed on (or skipped by the filter).
    last: i64,
    backlog: VecDeque<Arc<AuditEvent>>,
    /// Read the durable log before waiting for live events.
    catch_up: bool,
    types: Vec<String>,
    failed: bool,
}

const REPLAY_BATCH: u32 = 500;

impl Cursor {
    async fn next(&mut self) -> Option<Result<Arc<AuditEvent>, ServiceError>> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(event) = self.backlog.pop_front() {
                let seq = event.sequence.unwrap_or_default();
                if seq <= self.last {
                    continue;
                }
                self.last = seq;
                if self.types.is_empty() || self.types.iter().any(|t| *t == event.event_type) {
                    return Some(Ok(event));
                }
                continue;
            }
            if self.catch_up {
                match self
                    .store
                    .events_after(self.workspace_id, self.last, REPLAY_BATCH)
                    .await
                {
                    Ok(events) => {
                        self.catch_up = events.len() == REPLAY_BATCH as usize;
                        self.backlog.extend(events.into_iter().map(Arc::new));
                        continue;
                    }
                    Err(e) => {
                        // The client resumes from its Last-Event-ID; nothing is skipped.
                        self.failed = true;
                        return Some(Err(e.into()));
                    }
                }
            }
            match self.rx.recv().await {
                Ok(event) => {
                    let seq = event.sequence.unwrap_or_default();
                    if seq == self.last + 1 {
                        self.backlog.push_back(event);
                    } else if seq > self.last + 1 {
                        // A gap (this subscriber joined mid-flight): fill it from the log.
                        self.catch_up = true;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => self.catch_up = true,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl Services {
    /// The workspace's audit events after `request.after` from the durable log, then live,
    /// gapless and without duplicates at the seam.
    pub async fn audit_stream(
        &self,
        principal: &Principal,
        workspace: &str,
        request: StreamRequest,
    ) -> Result<
        impl Stream<Item = Result<Arc<AuditEvent>, ServiceError>> + Send + 'static,
        ServiceError,
    > {
        self.authorize(
            principal,
            Operation::ReadAuditStream,
            Some(workspace),
            vec![],
        )
        .await?;
        let workspace_id = crate::domain::parse_uuid(workspace)
            .ok_or_else(|| ServiceError::forbidden("no access"))?;
        // Subscribe first, then read the log: an event committed in between is in one or both,
        // and the cursor drops what it has already passed on.
        let (rx, head) = self.feed.subscribe(workspace_id).await?;
        let cursor = Cursor {
            store: self.store.clone(),
            rx,
            workspace_id,
            last: request.after.unwrap_or(head),
            backlog: VecDeque::new(),
            catch_up: true,
            types: request.types,
            failed: false,
        };
        Ok(futures_util::stream::unfold(
            cursor,
            |mut cursor| async move { cursor.next().await.map(|item| (item, cursor)) },
        ))
    }

    /// Subscribers of the audit stream in this process.
    pub fn audit_subscribers(&self) -> usize {
        self.feed.subscribers()
    }
}
