//! A workspace's activity: its audit events, newest first, a page at a time.

use super::{Operation, ServiceError, Services};
use crate::domain::{AuditEvent, FieldError, Principal, parse_sequence};

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
        // One extra row tells whether another page exists without a count query.
        let mut items = self
            .store
            .list_events(workspace_id, page.before, page.limit + 1)
            .await?;
        let more = items.len() > page.limit as usize;
        items.truncate(page.limit as usize);
        let next_cursor = if more {
            items.last().and_then(|e| e.sequence).map(encode_cursor)
        } else {
            None
        };
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
