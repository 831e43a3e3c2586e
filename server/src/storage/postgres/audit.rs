//! The audit log: writing events (with their NOTIFY) and reading them back.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{FromRow, PgConnection, Row as _};
use uuid::Uuid;

use super::{PostgresStore, map_err};
use crate::domain::{AuditEvent, NewAuditEvent};
use crate::storage::{AuditStore, StoreError};

/// Channel on which new audit events are announced, as `<workspace id> <sequence>`.
pub const AUDIT_CHANNEL: &str = "cp_audit";

/// Writes one audit event, taking the next sequence of its workspace under that row's lock, and
/// announces it on [`AUDIT_CHANNEL`] (delivered at commit, so listeners never see a rolled-back
/// event). One round trip.
pub(crate) async fn insert_event(
    conn: &mut PgConnection,
    event: &NewAuditEvent,
) -> Result<(), StoreError> {
    sqlx::query(
        "WITH seq AS (
             UPDATE workspaces SET audit_seq = audit_seq + 1 WHERE id = $3 RETURNING audit_seq
         ), ins AS (
             INSERT INTO audit_events (id, organisation_id, workspace_id, seq, event_type,
                 actor_kind, actor_id, target_kind, target_id, correlation_id, occurred_at, data)
             VALUES ($1, $2, $3, (SELECT audit_seq FROM seq), $4, $5, $6, $7, $8, $9, $10, $11)
             RETURNING workspace_id, seq
         )
         SELECT pg_notify('cp_audit', workspace_id::text || ' ' || seq::text)
         FROM ins WHERE seq IS NOT NULL",
    )
    .bind(Uuid::new_v4())
    .bind(event.organisation_id)
    .bind(event.workspace_id)
    .bind(event.event_type)
    .bind(event.actor.kind.as_str())
    .bind(event.actor.id)
    .bind(event.target_kind)
    .bind(event.target_id)
    .bind(&event.correlation_id)
    .bind(event.occurred_at)
    .bind(&event.data)
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(())
}

/// Writes events in workspace order so concurrent writers lock workspace rows in one order.
pub(super) async fn insert_events(
    conn: &mut PgConnection,
    events: &[NewAuditEvent],
) -> Result<(), StoreError> {
    let mut ordered: Vec<&NewAuditEvent> = events.iter().collect();
    ordered.sort_by_key(|e| e.workspace_id);
    for event in ordered {
        insert_event(conn, event).await?;
    }
    Ok(())
}

#[async_trait]
impl AuditStore for PostgresStore {
    async fn events_after(
        &self,
        workspace_id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM audit_events
             WHERE workspace_id = $1 AND seq > $2
             ORDER BY seq LIMIT $3"
        )))
        .bind(workspace_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(EventRow::into_event).collect()
    }

    async fn list_events(
        &self,
        workspace_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let mut lease = self.lane.lease().await?;
        let query = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM audit_events
             WHERE workspace_id = $1 AND ($2::bigint IS NULL OR seq < $2)
             ORDER BY seq DESC LIMIT $3"
        )))
        .bind(workspace_id)
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(lease.conn()?);
        let outcome = tokio::time::timeout(self.lane.deadline(), query).await;
        let rows: Vec<EventRow> = lease.settle(outcome)?;
        rows.into_iter().map(EventRow::into_event).collect()
    }
}

/// The columns [`EventRow`] decodes, in its order. jsonb as text: readers pass event data
/// through, so nothing parses it into a tree.
const EVENT_COLUMNS: &str = "id, organisation_id, workspace_id, seq, event_type, actor_kind,
    actor_id, target_kind, target_id, correlation_id, occurred_at, data::text AS data";

struct EventRow {
    id: Uuid,
    organisation_id: Uuid,
    workspace_id: Option<Uuid>,
    seq: Option<i64>,
    event_type: String,
    actor_kind: String,
    actor_id: Option<Uuid>,
    target_kind: String,
    target_id: Uuid,
    correlation_id: String,
    occurred_at: DateTime<Utc>,
    data: String,
}

impl<'r> FromRow<'r, PgRow> for EventRow {
    /// By position, in [`EVENT_COLUMNS`] order: a page is 51 rows, and looking each column up
    /// by name showed in profiles.
    fn from_row(row: &'r PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get(0)?,
            organisation_id: row.try_get(1)?,
            workspace_id: row.try_get(2)?,
            seq: row.try_get(3)?,
            event_type: row.try_get(4)?,
            actor_kind: row.try_get(5)?,
            actor_id: row.try_get(6)?,
            target_kind: row.try_get(7)?,
            target_id: row.try_get(8)?,
            correlation_id: row.try_get(9)?,
            occurred_at: row.try_get(10)?,
            data: row.try_get(11)?,
        })
    }
}

impl EventRow {
    fn into_event(self) -> Result<AuditEvent, StoreError> {
        let data = serde_json::value::RawValue::from_string(self.data)
            .map_err(|e| StoreError::Internal(format!("stored event data is not JSON: {e}")))?;
        Ok(AuditEvent {
            id: self.id,
            organisation_id: self.organisation_id,
            workspace_id: self.workspace_id,
            sequence: self.seq,
            event_type: self.event_type,
            actor_kind: self.actor_kind,
            actor_id: self.actor_id,
            target_kind: self.target_kind,
            target_id: self.target_id,
            correlation_id: self.correlation_id,
            occurred_at: self.occurred_at,
            data,
        })
    }
}
