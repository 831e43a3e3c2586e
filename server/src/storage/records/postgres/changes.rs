//! The change feed on Postgres: LISTEN on the channel of a topic, which every replica's
//! writes NOTIFY at commit (the numbering pass, `throughput/event_numbering.rs`, on
//! [`AUDIT_CHANNEL`] once events have their sequence; `policy_changed` on [`POLICY_CHANNEL`]).
//!
//! Each stream holds one pool connection for good (counted in `LISTENING_CONNECTIONS`). One
//! listener per topic keeps each consumer's connection carrying only what it acts on; one
//! shared listener would free a connection but change the read pool's sizing.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt as _;
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
                    let changes = next_changes(&mut listener).await;
                    Some((futures_util::stream::iter(changes), listener))
                })
                .flatten(),
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

/// The changes of the next notification that names any.
async fn next_changes(listener: &mut PgListener) -> Vec<Change> {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                let changes = parse(notification.channel(), notification.payload());
                if !changes.is_empty() {
                    return changes;
                }
            }
            // The connection was lost and is re-established: what was sent meanwhile is gone.
            Ok(None) => return vec![Change::Resync],
            Err(e) => {
                tracing::debug!(error = %e, "the change listener cannot reconnect yet");
                tokio::time::sleep(RETRY_PAUSE).await;
                return vec![Change::Resync];
            }
        }
    }
}

/// An audit announcement is `<workspace id> <sequence>`, up to 100 joined by `,` (a numbering
/// pass's heads); a policy one is empty. A malformed head is skipped.
fn parse(channel: &str, payload: &str) -> Vec<Change> {
    if channel == POLICY_CHANNEL {
        return vec![Change::PolicyChanged];
    }
    payload
        .split(',')
        .filter_map(|head| {
            let mut parts = head.split(' ');
            let workspace_id = parts.next().and_then(|w| Uuid::parse_str(w).ok())?;
            Some(Change::AuditAppended {
                workspace_id,
                sequence: parts.next().and_then(|s| s.parse().ok()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_parse() {
        let (ws, other) = (Uuid::new_v4(), Uuid::new_v4());
        assert_eq!(
            parse(AUDIT_CHANNEL, &format!("{ws} 42,{other} 7")),
            vec![
                Change::AuditAppended {
                    workspace_id: ws,
                    sequence: Some(42)
                },
                Change::AuditAppended {
                    workspace_id: other,
                    sequence: Some(7)
                }
            ]
        );
        assert_eq!(
            parse(AUDIT_CHANNEL, &format!("not-a-uuid 1,{ws} 3")),
            vec![Change::AuditAppended {
                workspace_id: ws,
                sequence: Some(3)
            }]
        );
        assert_eq!(parse(AUDIT_CHANNEL, "not-a-uuid 1"), vec![]);
        assert_eq!(parse(POLICY_CHANNEL, ""), vec![Change::PolicyChanged]);
    }
}
