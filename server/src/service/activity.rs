//! A workspace's activity: its audit events, newest first, a page at a time.
//!
//! # What a token limited to some environments reads
//! An event tied to an environment (its data names an `environmentId`: a command submitted
//! to it) is read only by tokens that reach that environment: unlimited ones, and those limited
//! to a list that holds it. Events of runner commands and their deliveries
//! (`runner_command.*`, `webhook_delivery.*`) that name no environment belong to a command
//! sent to none, or do not say which: they lie outside every limited token, as such a command
//! does (a limited token cannot submit one) — the rule fails closed. Every other event is about
//! the workspace itself (pools, runners, tokens, workflows, reviews) and stays readable by any
//! token allowed to read the workspace's activity. The same rule filters the audit stream
//! ([`visible_to`], `service/audit.rs`). See docs/decisions.md.

use serde::Deserialize;
use uuid::Uuid;

use super::{Operation, ServiceError, Services};
use crate::domain::{AuditEvent, FieldError, Principal, parse_sequence};

/// A limited token's page is filled from at most this many reads of the log; past them the
/// page is answered as it is (possibly short, even empty) with a cursor to go on from.
const SCAN_READS: usize = 10;

/// Whether `principal` may read `event` of a workspace it may read (module doc).
pub(super) fn visible_to(principal: &Principal, event: &AuditEvent) -> bool {
    if principal.environment_ids.is_empty() {
        return true;
    }
    match environment_of(event) {
        Some(environment) => principal.environment_ids.contains(&environment),
        None => !is_command_event(&event.event_type),
    }
}

fn is_command_event(event_type: &str) -> bool {
    event_type.starts_with("runner_command.") || event_type.starts_with("webhook_delivery.")
}

/// The environment an event's data names, read without parsing the rest of it.
fn environment_of(event: &AuditEvent) -> Option<Uuid> {
    #[derive(Deserialize)]
    struct Tied {
        #[serde(rename = "environmentId")]
        environment_id: Option<Uuid>,
    }
    serde_json::from_str::<Tied>(event.data.get())
        .ok()
        .and_then(|tied| tied.environment_id)
}

/// A validated page request: `limit` 1..=100 (default 50) and an opaque cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    limit: u32,
    before: Option<i64>,
}

impl PageRequest {
    pub const DEFAULT_LIMIT: u32 = 50;
    pub const MAX_LIMIT: u32 = 100;

    pub fn parse(limit: Option<i64>, cursor: Option<&str>) -> Result<Self, FieldError> {
        let limit = match limit {
            None => Self::DEFAULT_LIMIT,
            Some(n) if (1..=i64::from(Self::MAX_LIMIT)).contains(&n) => n as u32,
            Some(n) => {
                return Err(
                    FieldError::new("limit", "must be an integer from 1 to 100").with_value(n)
                );
            }
        };
        // An empty `cursor=` is no cursor: the first page (the document says so).
        let before = cursor
            .filter(|c| !c.is_empty())
            .map(decode_cursor)
            .transpose()?;
        Ok(Self { limit, before })
    }
}

/// A cursor is the sequence the next page ends below, in decimal (`SEQUENCE_PATTERN`): the
/// document can then state exactly which cursors are valid, and every one it allows is (one
/// that points below the log is an empty page). Clients still treat it as opaque.
fn decode_cursor(cursor: &str) -> Result<i64, FieldError> {
    parse_sequence(cursor)
        .ok_or_else(|| FieldError::new("cursor", "is not a cursor this server issued"))
}

fn encode_cursor(sequence: i64) -> String {
    sequence.to_string()
}

#[derive(Debug, Clone)]
pub struct ActivityPage {
    pub items: Vec<AuditEvent>,
    pub next_cursor: Option<String>,
}

impl Services {
    /// Refuses a position whose next event retention removed: the client would otherwise miss
    /// events without knowing (410 `cursor_expired`, docs/decisions.md). `next` is the sequence
    /// the client reads next (a page cursor's minus one, a `Last-Event-ID`'s plus one).
    pub(super) async fn check_not_expired(
        &self,
        workspace_id: Uuid,
        next: i64,
    ) -> Result<(), ServiceError> {
        match self.store.removed_through(workspace_id).await? {
            Some(removed) if next <= removed => Err(ServiceError::CursorExpired {
                oldest: removed + 1,
            }),
            _ => Ok(()),
        }
    }

    pub async fn list_activity(
        &self,
        principal: &Principal,
        workspace: &str,
        page: PageRequest,
    ) -> Result<ActivityPage, ServiceError> {
        self.authorize(principal, Operation::ReadActivity, Some(workspace), vec![])
            .await?;
        let workspace_id =
            uuid::Uuid::parse_str(workspace).map_err(|_| ServiceError::forbidden("no access"))?;
        // One extra row tells whether another page exists without a count query. A token that
        // reads every event is served by the first read; a limited one reads on while the
        // events it may not see leave its page short, up to `SCAN_READS` reads.
        let (limit, batch) = (page.limit as usize, page.limit + 1);
        let mut items = Vec::with_capacity(batch as usize);
        let mut before = page.before;
        for read in 0..SCAN_READS {
            let events = self.reads.list_events(workspace_id, before, batch).await?;
            if read == 0 && events.is_empty() {
                // Only an empty first read can be a cursor into removed events: one more read.
                if let Some(before) = page.before {
                    self.check_not_expired(workspace_id, before - 1).await?;
                }
            }
            let exhausted = events.len() < batch as usize;
            for event in events {
                before = event.sequence;
                if visible_to(principal, &event) {
                    items.push(event);
                }
            }
            if items.len() > limit {
                items.truncate(limit);
                let next_cursor = items.last().and_then(|e| e.sequence).map(encode_cursor);
                return Ok(ActivityPage { items, next_cursor });
            }
            if exhausted {
                return Ok(ActivityPage {
                    items,
                    next_cursor: None,
                });
            }
        }
        // Out of reads: go on below the last event looked at.
        let next_cursor = before.map(encode_cursor);
        Ok(ActivityPage { items, next_cursor })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_rejected() {
        assert_eq!(decode_cursor(&encode_cursor(42)).ok(), Some(42));
        assert_eq!(decode_cursor("0").ok(), Some(0));
        assert_eq!(
            decode_cursor("999999999999999999").ok(),
            Some(999_999_999_999_999_999)
        );
        for garbage in [
            "not-a-cursor",
            "-1",
            "+1",
            " 1",
            "1\n",
            "1e3",
            "9999999999999999999",
        ] {
            assert!(decode_cursor(garbage).is_err(), "{garbage:?}");
        }
    }

    #[test]
    fn limit_boundaries() {
        assert!(PageRequest::parse(Some(0), None).is_err());
        assert!(PageRequest::parse(Some(1), None).is_ok());
        assert!(PageRequest::parse(Some(100), None).is_ok());
        assert!(PageRequest::parse(Some(101), None).is_err());
        assert_eq!(PageRequest::parse(None, None).map(|p| p.limit), Ok(50));
    }
}
