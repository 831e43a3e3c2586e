//! The change-feed port: what changed in the records store, announced to this process.
//!
//! Consumers (the audit fan-out, the policy watcher) act on announcements and still poll: an
//! announcement says "read now", never "this is everything". Announcements are lost when a
//! listener reconnects (Postgres NOTIFY is not queued for a disconnected session) or when a
//! consumer falls behind, so the stream says [`Change::Resync`] then, and a store that cannot
//! hear other processes at all (SQLite: `cpctl` writes from its own process) says so through
//! [`ChangeStream::announces_every_process`], so consumers poll often enough on their own.

use async_trait::async_trait;
use futures_util::future::FutureExt as _;
use futures_util::stream::{BoxStream, Stream, StreamExt as _};
use uuid::Uuid;

/// One announcement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A workspace gained audit events; `sequence` is the newest when the store says it
    /// (Postgres), which a consumer may use but must not rely on.
    AuditAppended {
        workspace_id: Uuid,
        sequence: Option<i64>,
    },
    /// A policy was activated, rolled back, shadowed or removed.
    PolicyChanged,
    /// Announcements may have been lost (the listener reconnected, or this consumer fell
    /// behind): read everything the consumer follows.
    Resync,
}

/// What a consumer follows. Each topic is a stream of its own, so a consumer hears only what
/// it acts on (on Postgres, one LISTEN channel per topic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    AuditEvents,
    Policies,
}

/// Announcements of one topic, for one consumer.
pub struct ChangeStream {
    changes: BoxStream<'static, Change>,
    every_process: bool,
}

impl ChangeStream {
    /// `every_process`: whether changes made by other processes are announced too.
    pub fn new(changes: impl Stream<Item = Change> + Send + 'static, every_process: bool) -> Self {
        Self {
            changes: changes.boxed(),
            every_process,
        }
    }

    /// A stream that announces nothing: the consumer polls.
    pub fn silent() -> Self {
        Self::new(futures_util::stream::pending(), false)
    }

    /// The next announcement. A stream that has ended (or never announces) waits forever, so
    /// this can sit in a `select!` next to the consumer's poll.
    pub async fn next(&mut self) -> Change {
        match self.changes.next().await {
            Some(change) => change,
            None => std::future::pending().await,
        }
    }

    /// An announcement already received, without waiting: to coalesce a burst.
    pub fn next_ready(&mut self) -> Option<Change> {
        self.changes.next().now_or_never().flatten()
    }

    /// False when only this process's own changes are announced (or none): the consumer must
    /// poll to see other processes' within its bound.
    pub fn announces_every_process(&self) -> bool {
        self.every_process
    }
}

/// Announcements of changes, from the records store.
#[async_trait]
pub trait ChangeFeed: Send + Sync {
    /// Opens a stream of `topic`'s announcements. On Postgres each call holds a pool connection
    /// for good (see `LISTENING_CONNECTIONS`): open one per consumer, once. When listening
    /// cannot start, the stream is silent (and says it announces nothing) and the consumer
    /// polls, as it must for lost announcements anyway.
    async fn changes(&self, topic: Topic) -> ChangeStream;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ready_announcements_drain_without_waiting() {
        let mut stream = ChangeStream::new(
            futures_util::stream::iter([Change::PolicyChanged, Change::Resync])
                .chain(futures_util::stream::pending()),
            true,
        );
        assert_eq!(stream.next().await, Change::PolicyChanged);
        assert_eq!(stream.next_ready(), Some(Change::Resync));
        assert_eq!(stream.next_ready(), None);
        let mut silent = ChangeStream::silent();
        assert!(!silent.announces_every_process());
        assert_eq!(silent.next_ready(), None);
    }
}
