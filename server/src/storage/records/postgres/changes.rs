//! The change feed on Postgres: LISTEN on the channel of a topic, which every replica's
//! writes NOTIFY at commit (the numbering pass, `throughput/event_numbering.rs`, on
//! [`AUDIT_CHANNEL`] once events have their sequence; `policy_changed` on [`POLICY_CHANNEL`]).
//!
//! Each stream holds one pool connection for good (counted in `LISTENING_CONNECTIONS`). One
//! listener per topic keeps each consumer's connection carrying only what it acts on; one
//! shared listener would free a connection but change the read pool's sizing.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgListener;
use uuid::Uuid;

use super::{AUDIT_CHANNEL, POLICY_CHANNEL, PostgresStore};
use crate::storage::{Change, ChangeFeed, ChangeStream, Topic};

/// After an error the listener could not reconnect: wait before trying again, so a closed pool
/// or a database that is down does not spin (consumers poll meanwhile).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

#[async_trait]
impl ChangeFeed for PostgresStore {
    async fn changes(&self, topic: Topic) -> ChangeStream {
        let channel = match topic {
            Topic::AuditEvents => AUDIT_CHANNEL,
            Topic::Policies => POLICY_CHANNEL,
        };
        let listening = match PgListener::connect_with(self.pool()).await {
            Ok(mut listener) => listener.listen(channel).await.map(|()| listener),
            Err(e) => Err(e),
        };
        match listening {
            Ok(listener) => ChangeStream::new(
                futures_util::stream::unfold(listener, |mut listener| async move {
                    let change = next_change(&mut listener).await;
                    Some((change, listener))
                }),
                true,
            ),
            Err(e) => {
                match topic {
                    Topic::AuditEvents => {
                        tracing::warn!(error = %e, "cannot listen for audit events; polling only")
                    }
                    Topic::Policies => {
                        tracing::warn!(error = %e, "cannot listen for policy changes; polling only")
                    }
                }
                ChangeStream::silent()
            }
        }
    }
}

async fn next_change(listener: &mut PgListener) -> Change {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                if let Some(change) = parse(notification.channel(), notification.payload()) {
                    return change;
                }
            }
            // The connection was lost and is re-established: what was sent meanwhile is gone.
            Ok(None) => return Change::Resync,
            Err(e) => {
                tracing::debug!(error = %e, "the change listener cannot reconnect yet");
                tokio::time::sleep(RETRY_PAUSE).await;
                return Change::Resync;
            }
        }
    }
}

/// An audit announcement is `<workspace id> <sequence>`; a policy one is empty.
fn parse(channel: &str, payload: &str) -> Option<Change> {
    if channel == POLICY_CHANNEL {
        return Some(Change::PolicyChanged);
    }
    let mut parts = payload.split(' ');
    let workspace_id = parts.next().and_then(|w| Uuid::parse_str(w).ok())?;
    Some(Change::AuditAppended {
        workspace_id,
        sequence: parts.next().and_then(|s| s.parse().ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_parse() {
        let ws = Uuid::new_v4();
        assert_eq!(
            parse(AUDIT_CHANNEL, &format!("{ws} 42")),
            Some(Change::AuditAppended {
                workspace_id: ws,
                sequence: Some(42)
            })
        );
        assert_eq!(parse(AUDIT_CHANNEL, "not-a-uuid 1"), None);
        assert_eq!(parse(POLICY_CHANNEL, ""), Some(Change::PolicyChanged));
    }
}
