//! Writing one audit event, numbered as it is written and announced after its commit
//! (`dialect.rs`); reading them is shared (`storage/records/sql/audit.rs`).

use sqlx::SqliteConnection;
use uuid::Uuid;

use super::{WriteTx, map_err};
use crate::domain::NewAuditEvent;
use crate::storage::StoreError;

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
