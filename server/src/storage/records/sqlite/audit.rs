//! Writing one audit event, numbered as it is written and announced after its commit
//! (`dialect.rs`); reading them is shared (`storage/records/sql/audit.rs`).

use sqlx::SqliteConnection;

use super::{SqliteStore, WriteTx, map_err};
use crate::domain::NewAuditEvent;
use crate::storage::StoreError;
use crate::storage::records::sql::audit::insert_event_row;

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
    insert_event_row::<SqliteStore>(conn, event, seq).await
}
