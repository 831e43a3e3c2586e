//! The audit log: writing events (announced after commit, see `SqliteStore::commit`) and reading
//! them back.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{FromRow, SqliteConnection};
use uuid::Uuid;

use super::{SqliteStore, map_err};
use crate::domain::{AuditEvent, NewAuditEvent};
use crate::storage::{AuditStore, StoreError};

/// Writes one audit event, giving a workspace event the next sequence of its workspace (the
/// transaction holds the write lock, so sequences are gapless and unique).
pub(super) async fn insert_event(
    conn: &mut SqliteConnection,
    event: &NewAuditEvent,
) -> Result<(), StoreError> {
    // Organisation-level events have no sequence.
    let seq: Option<i64> = match event.workspace_id {
        Some(workspace_id) => {
            let row: Option<(i64,)> = sqlx::query_as(
                "UPDATE workspaces SET audit_seq = audit_seq + 1 WHERE id = $1 RETURNING audit_seq",
            )
            .bind(workspace_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
            row.map(|(seq,)| seq)
        }
        None => None,
    };
    sqlx::query(
        "INSERT INTO audit_events (id, organisation_id, workspace_id, seq, event_type, actor_kind,
             actor_id, target_kind, target_id, correlation_id, occurred_at, data)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(Uuid::new_v4())
    .bind(event.organisation_id)
    .bind(event.workspace_id)
    .bind(seq)
    .bind(event.event_type)
    .bind(event.actor.kind.as_str())
    .bind(event.actor.id)
    .bind(event.target_kind)
    .bind(event.target_id)
    .bind(&event.correlation_id)
    .bind(event.occurred_at)
    .bind(event.data.to_string())
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(())
}

#[derive(FromRow)]
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

#[async_trait]
impl AuditStore for SqliteStore {
    async fn list_events(
        &self,
        workspace_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let rows: Vec<EventRow> = sqlx::query_as(
            "SELECT id, organisation_id, workspace_id, seq, event_type, actor_kind, actor_id,
                    target_kind, target_id, correlation_id, occurred_at, data
             FROM audit_events
             WHERE workspace_id = $1 AND ($2 IS NULL OR seq < $2)
             ORDER BY seq DESC LIMIT $3",
        )
        .bind(workspace_id)
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(EventRow::into_event).collect()
    }

    async fn events_after(
        &self,
        workspace_id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let rows: Vec<EventRow> = sqlx::query_as(
            "SELECT id, organisation_id, workspace_id, seq, event_type, actor_kind, actor_id,
                    target_kind, target_id, correlation_id, occurred_at, data
             FROM audit_events
             WHERE workspace_id = $1 AND seq > $2
             ORDER BY seq LIMIT $3",
        )
        .bind(workspace_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(EventRow::into_event).collect()
    }
}
