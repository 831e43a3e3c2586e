//! Writing one audit event, numbered and chained as it is written and announced after its
//! commit (`dialect.rs`); reading them is shared (`storage/records/sql/audit.rs`).

use sqlx::SqliteConnection;
use uuid::Uuid;

use super::{SqliteStore, WriteTx, map_err};
use crate::domain::{GENESIS_HASH, NewAuditEvent, chain_hash_new};
use crate::storage::StoreError;
use crate::storage::records::sql::audit::insert_event_row;

/// Writes one audit event, giving a workspace event the next sequence of its workspace and the
/// next link of its hash chain (`domain/audit_chain.rs`); the transaction holds the write lock,
/// so sequences are gapless and unique and the chain has one head. The transaction notes the
/// workspace, announced once it commits.
pub(super) async fn insert_event(
    tx: &mut WriteTx,
    event: &NewAuditEvent,
) -> Result<(), StoreError> {
    tx.workspaces.extend(event.workspace_id);
    let conn: &mut SqliteConnection = tx;
    let id = Uuid::new_v4();
    // Organisation-level events have no sequence and no chain.
    let mut chained = None;
    if let Some(workspace_id) = event.workspace_id {
        let row: Option<(i64, Option<Vec<u8>>)> = sqlx::query_as(
            "UPDATE workspaces SET audit_seq = audit_seq + 1 WHERE id = $1
             RETURNING audit_seq, audit_hash",
        )
        .bind(workspace_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
        if let Some((seq, prev)) = row {
            // The work the chain adds to a write: one SHA-256 and this UPDATE.
            let hash = chain_hash_new(prev.as_deref().unwrap_or(&GENESIS_HASH), id, seq, event)
                .map_err(|e| StoreError::Internal(e.to_string()))?;
            sqlx::query("UPDATE workspaces SET audit_hash = $2 WHERE id = $1")
                .bind(workspace_id)
                .bind(&hash[..])
                .execute(&mut *conn)
                .await
                .map_err(map_err)?;
            chained = Some((seq, hash));
        }
    }
    insert_event_row::<SqliteStore>(conn, event, id, chained).await
}
