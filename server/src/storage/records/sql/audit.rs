//! Reading the audit log (shared by both SQL adapters; see the layout in `storage/mod.rs`).
//! Writing events is each adapter's own (`insert_event`, `insert_events`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{ColumnIndex, Decode, FromRow, Row};
use uuid::Uuid;

use crate::domain::{AuditEvent, NewAuditEvent};
use crate::storage::records::dialect::{Conn, Dialect};
use crate::storage::{AuditStore, StoreError};

/// The columns [`EventRow`] decodes, in its order. Data as text: readers pass event data
/// through, so nothing parses it into a tree.
pub(in crate::storage::records) const EVENT_COLUMNS: &str =
    "id, organisation_id, workspace_id, seq, event_type,
    actor_kind, actor_id, target_kind, target_id, correlation_id, occurred_at,
    CAST(data AS TEXT) AS data, actor_token_id";

/// An [`AuditEvent`] decoded straight from a row: a page's rows become its events in place,
/// with no second vector.
pub(in crate::storage::records) struct EventRow(AuditEvent);

impl<'r, R: Row> FromRow<'r, R> for EventRow
where
    usize: ColumnIndex<R>,
    Uuid: Decode<'r, R::Database>,
    i64: Decode<'r, R::Database>,
    String: Decode<'r, R::Database>,
    DateTime<Utc>: Decode<'r, R::Database>,
{
    /// By position, in [`EVENT_COLUMNS`] order: a page is 51 rows, and looking each column up
    /// by name showed in profiles. Unchecked: the types are fixed by `EVENT_COLUMNS` beside
    /// this and read back by every backend's suite, while sqlx's check of each cell (a type
    /// clone and compare, 612 per page) showed in profiles of `GET activity`.
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        let data: String = row.try_get_unchecked(11)?;
        let data = serde_json::value::RawValue::from_string(data).map_err(|e| {
            sqlx::Error::Decode(format!("stored event data is not JSON: {e}").into())
        })?;
        Ok(Self(AuditEvent {
            id: row.try_get_unchecked(0)?,
            organisation_id: row.try_get_unchecked(1)?,
            workspace_id: row.try_get_unchecked(2)?,
            sequence: row.try_get_unchecked(3)?,
            event_type: row.try_get_unchecked(4)?,
            actor_kind: row.try_get_unchecked(5)?,
            actor_id: row.try_get_unchecked(6)?,
            target_kind: row.try_get_unchecked(7)?,
            target_id: row.try_get_unchecked(8)?,
            correlation_id: row.try_get_unchecked(9)?,
            occurred_at: row.try_get_unchecked(10)?,
            data,
            actor_token_id: row.try_get_unchecked(12)?,
        }))
    }
}

impl EventRow {
    pub(in crate::storage::records) fn into_event(self) -> AuditEvent {
        self.0
    }
}

/// Writes one audit event with the sequence and chain hash its backend gave it: none for an
/// organisation's event, and none yet on Postgres, which numbers (and hashes) events after
/// their commit.
pub(in crate::storage::records) async fn insert_event_row<S: Dialect>(
    conn: &mut Conn<S>,
    event: &NewAuditEvent,
    id: Uuid,
    chained: Option<(i64, [u8; 32])>,
) -> Result<(), StoreError> {
    S::query(
        "INSERT INTO audit_events (id, organisation_id, workspace_id, seq, event_type, actor_kind,
             actor_id, target_kind, target_id, correlation_id, occurred_at, data, hash,
             actor_token_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
    )
    .bind(id)
    .bind(event.organisation_id)
    .bind(event.workspace_id)
    .bind(chained.map(|(seq, _)| seq))
    .bind(event.event_type)
    .bind(event.actor.kind.as_str())
    .bind(event.actor.id)
    .bind(event.target_kind)
    .bind(event.target_id)
    .bind(&event.correlation_id)
    .bind(event.occurred_at)
    .bind(sqlx::types::Json(&event.data))
    .bind(chained.map(|(_, hash)| hash.to_vec()))
    .bind(event.actor.token_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// One page of a workspace's events, newest first, below an optional cursor. `seq IS NOT
/// NULL`: Postgres numbers events after their commit (SQLite as it inserts). Named so that the
/// activity floor can be checked against it.
pub(in crate::storage::records) fn page_sql() -> String {
    format!(
        "SELECT {EVENT_COLUMNS} FROM audit_events
         WHERE workspace_id = $1 AND seq IS NOT NULL
           AND (CAST($2 AS BIGINT) IS NULL OR seq < $2)
         ORDER BY seq DESC LIMIT $3"
    )
}

#[async_trait]
impl<S: Dialect> AuditStore for S {
    async fn list_events(
        &self,
        workspace_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let query = S::query(sqlx::AssertSqlSafe(page_sql()))
            .bind(workspace_id)
            .bind(before)
            .bind(i64::from(limit));
        let rows: Vec<EventRow> = self.read_all(query).await?;
        Ok(rows.into_iter().map(EventRow::into_event).collect())
    }

    async fn events_after(
        &self,
        workspace_id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let rows: Vec<EventRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM audit_events
             WHERE workspace_id = $1 AND seq > $2
             ORDER BY seq LIMIT $3"
        )))
        .bind(workspace_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(EventRow::into_event).collect())
    }

    async fn settle_events(&self) -> Result<(), StoreError> {
        self.number_waiting_events().await
    }
}
