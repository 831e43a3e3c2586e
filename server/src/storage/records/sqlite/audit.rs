//! The audit log: writing one event (announced after commit by `SqliteStore::commit`) and the
//! activity page; the rest is shared (`storage/records/sql/audit.rs`).

use sqlx::SqliteConnection;
use uuid::Uuid;

use self::shared::{EVENT_COLUMNS, EventRow};
use super::{SqliteStore, WriteTx, map_err};
use crate::domain::NewAuditEvent;
use crate::storage::StoreError;

// Compiled once per SQL backend (see the layout in `storage/mod.rs`).
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/audit.rs"]
mod shared;

/// Writes events in their order, each numbered as it is written.
pub(super) async fn insert_events<'e>(
    tx: &mut WriteTx,
    events: impl IntoIterator<Item = &'e NewAuditEvent>,
) -> Result<(), StoreError> {
    for event in events {
        insert_event(tx, event).await?;
    }
    Ok(())
}

/// Writes one audit event, giving a workspace event the next sequence of its workspace (the
/// transaction holds the write lock, so sequences are gapless and unique). The transaction
/// notes the workspace, announced once it commits.
pub(super) async fn insert_event(
    tx: &mut WriteTx,
    event: &NewAuditEvent,
) -> Result<(), StoreError> {
    tx.workspaces.extend(event.workspace_id);
    let conn: &mut SqliteConnection = tx;
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

/// Nothing waits: each event is numbered as it is inserted, under the single writer.
async fn settle_events(_store: &SqliteStore) -> Result<(), StoreError> {
    Ok(())
}

/// A page of a workspace's activity, newest first.
async fn list_events_page(
    store: &SqliteStore,
    workspace_id: Uuid,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<EventRow>, StoreError> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {EVENT_COLUMNS} FROM audit_events
         WHERE workspace_id = $1 AND ($2 IS NULL OR seq < $2)
         ORDER BY seq DESC LIMIT $3"
    )))
    .bind(workspace_id)
    .bind(before)
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await
    .map_err(map_err)
}
