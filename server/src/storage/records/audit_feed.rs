//! Live fan-out of audit events to stream subscribers in this process, fed by the records store's
//! change feed (on Postgres, every replica's events; on SQLite, this process's) and a
//! once-a-second poll that covers announcements lost while a listener reconnects and events the
//! store does not announce.
//!
//! One topic per workspace with subscribers: the feed reads each new event once from the
//! records store and broadcasts it; `tokio::sync::broadcast` never blocks the sender, so a slow
//! subscriber only lags (and then catches up from the durable log) while writers and other
//! subscribers go on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use uuid::Uuid;

use super::{Change, SharedRecordStore, StoreError};
use crate::domain::AuditEvent;

/// Events buffered per topic before a subscriber that does not read is told it lagged.
const TOPIC_CAPACITY: usize = 1024;
/// Events read from the store per query.
const BATCH: u32 = 500;

struct Topic {
    tx: broadcast::Sender<Arc<AuditEvent>>,
    /// The newest sequence broadcast (or known to exist when the topic was made).
    last: i64,
}

pub struct AuditFeed {
    store: SharedRecordStore,
    topics: Mutex<HashMap<Uuid, Topic>>,
    /// Bumped on every burst of announcements, for consumers that only need "something was
    /// appended" (the delivery dispatcher) without a listening connection of their own.
    announced: watch::Sender<u64>,
}

impl AuditFeed {
    pub fn new(store: SharedRecordStore) -> Arc<Self> {
        Arc::new(Self {
            store,
            topics: Mutex::new(HashMap::new()),
            announced: watch::Sender::new(0),
        })
    }

    /// Changes each time [`follow`](Self::follow) hears that events were appended, in any
    /// workspace.
    pub fn announced(&self) -> watch::Receiver<u64> {
        self.announced.subscribe()
    }

    /// A receiver of every event of the workspace with a sequence above the returned one.
    /// Events up to that sequence are in the durable log already.
    pub async fn subscribe(
        &self,
        workspace_id: Uuid,
    ) -> Result<(broadcast::Receiver<Arc<AuditEvent>>, i64), StoreError> {
        if let Some(found) = self.existing(workspace_id) {
            return Ok(found);
        }
        let head = self
            .store
            .list_events(workspace_id, None, 1)
            .await?
            .first()
            .and_then(|e| e.sequence)
            .unwrap_or(0);
        let mut topics = self.topics.lock().map_err(|_| poisoned())?;
        let topic = topics.entry(workspace_id).or_insert_with(|| Topic {
            tx: broadcast::channel(TOPIC_CAPACITY).0,
            last: head,
        });
        Ok((topic.tx.subscribe(), topic.last))
    }

    fn existing(&self, workspace_id: Uuid) -> Option<(broadcast::Receiver<Arc<AuditEvent>>, i64)> {
        let topics = self.topics.lock().ok()?;
        topics
            .get(&workspace_id)
            .map(|t| (t.tx.subscribe(), t.last))
    }

    /// Number of live subscribers in this process.
    pub fn subscribers(&self) -> usize {
        self.topics
            .lock()
            .map(|t| t.values().map(|t| t.tx.receiver_count()).sum())
            .unwrap_or(0)
    }

    /// Reads and broadcasts what the workspace's subscribers have not been sent yet.
    pub async fn refresh(&self, workspace_id: Uuid) {
        loop {
            let Some(last) = self.topics.lock().ok().and_then(|mut topics| {
                let topic = topics.get(&workspace_id)?;
                if topic.tx.receiver_count() == 0 {
                    topics.remove(&workspace_id);
                    return None;
                }
                Some(topic.last)
            }) else {
                return;
            };
            let events = match self.store.events_after(workspace_id, last, BATCH).await {
                Ok(events) => events,
                Err(e) => {
                    tracing::warn!(error = %e, "audit feed cannot read new events");
                    return;
                }
            };
            let full = events.len() == BATCH as usize;
            if let Ok(mut topics) = self.topics.lock()
                && let Some(topic) = topics.get_mut(&workspace_id)
            {
                for event in events {
                    let seq = event.sequence.unwrap_or_default();
                    if seq > topic.last {
                        topic.last = seq;
                        // No receiver left is fine: the topic is dropped on the next pass.
                        let _ = topic.tx.send(Arc::new(event));
                    }
                }
            }
            if !full {
                return;
            }
        }
    }

    async fn refresh_all(&self) {
        let workspaces: Vec<Uuid> = self
            .topics
            .lock()
            .map(|t| t.keys().copied().collect())
            .unwrap_or_default();
        for workspace_id in workspaces {
            self.refresh(workspace_id).await;
        }
    }

    /// Follows the store's announcements of new audit events, and polls each second for what
    /// no announcement covered (lost while a listener reconnected, or written by a process the
    /// store does not hear, such as `cpctl` on SQLite). Call once: on Postgres it holds a
    /// connection for good.
    pub fn follow(self: &Arc<Self>) {
        let feed = self.clone();
        tokio::spawn(async move {
            let mut changes = feed.store.changes(super::Topic::AuditEvents).await;
            let mut poll = tokio::time::interval(Duration::from_secs(1));
            loop {
                let woke = tokio::select! {
                    change = changes.next() => Some(change),
                    _ = poll.tick() => None,
                };
                let Some(mut change) = woke else {
                    // Events a writer committed but did not see numbered (it died between the
                    // two) are numbered here, then read like any other.
                    if let Err(e) = feed.store.settle_events().await {
                        tracing::warn!(error = %e, "could not number waiting audit events");
                    }
                    feed.refresh_all().await;
                    continue;
                };
                let mut touched = Vec::new();
                let mut resync = false;
                // Coalesce a burst: one read per workspace, not one per event.
                loop {
                    match change {
                        Change::AuditAppended { workspace_id, .. } => {
                            if !touched.contains(&workspace_id) {
                                touched.push(workspace_id);
                            }
                        }
                        Change::Resync => resync = true,
                        Change::PolicyChanged => {}
                    }
                    match changes.next_ready() {
                        Some(next) => change = next,
                        None => break,
                    }
                }
                feed.announced.send_modify(|n| *n = n.wrapping_add(1));
                if resync {
                    feed.refresh_all().await;
                } else {
                    for ws in touched {
                        feed.refresh(ws).await;
                    }
                }
            }
        });
    }
}

fn poisoned() -> StoreError {
    StoreError::Internal("audit feed lock poisoned".into())
}
