//! Writing audit events, numbered after commit by `throughput/event_numbering.rs`, which
//! announces them with NOTIFY on [`AUDIT_CHANNEL`]; reading them is shared
//! (`storage/records/sql/audit.rs`).

use sqlx::PgConnection;
use uuid::Uuid;

use super::{PostgresStore, WriteTx, map_err};
use crate::domain::NewAuditEvent;
use crate::storage::StoreError;
use crate::storage::records::sql::audit::insert_event_row;

/// Channel on which new audit events are announced, as `<workspace id> <sequence>`.
pub const AUDIT_CHANNEL: &str = "cp_audit";

/// Writes one audit event without its sequence: the sequencer numbers it after the commit and
/// announces it on [`AUDIT_CHANNEL`] (`throughput/event_numbering.rs`), so no write holds its workspace's counter
/// through its commit. One round trip.
pub(super) async fn insert_event(
    tx: &mut WriteTx,
    event: &NewAuditEvent,
) -> Result<(), StoreError> {
    tx.workspaces.extend(event.workspace_id);
    insert_event_row::<PostgresStore>(tx, event, Uuid::new_v4(), None).await
}

/// Writes events in a write transaction, noting whether any is a workspace event.
pub(super) async fn insert_events(
    tx: &mut WriteTx,
    events: &[NewAuditEvent],
) -> Result<(), StoreError> {
    tx.workspaces
        .extend(events.iter().filter_map(|e| e.workspace_id));
    write_events(tx, events).await
}

/// Writes events in their order, as [`insert_event`] does, in one statement whatever their
/// number.
pub(super) async fn write_events<'e>(
    conn: &mut PgConnection,
    events: impl IntoIterator<Item = &'e NewAuditEvent>,
) -> Result<(), StoreError> {
    let events: Vec<&NewAuditEvent> = events.into_iter().collect();
    match events[..] {
        [] => return Ok(()),
        [event] => {
            return insert_event_row::<PostgresStore>(conn, event, Uuid::new_v4(), None).await;
        }
        _ => {}
    }
    let each = || events.iter();
    sqlx::query(
        "INSERT INTO audit_events (id, organisation_id, workspace_id, event_type, actor_kind,
             actor_id, target_kind, target_id, correlation_id, occurred_at, data, actor_token_id)
         SELECT e.id, e.organisation_id, e.workspace_id, e.event_type, e.actor_kind, e.actor_id,
             e.target_kind, e.target_id, e.correlation_id, e.occurred_at, e.data::jsonb,
             e.actor_token_id
         FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::uuid[],
                     $7::text[], $8::uuid[], $9::text[], $10::timestamptz[], $11::text[],
                     $12::uuid[])
              WITH ORDINALITY
              AS e(id, organisation_id, workspace_id, event_type, actor_kind, actor_id,
                   target_kind, target_id, correlation_id, occurred_at, data, actor_token_id, n)
         ORDER BY e.n",
    )
    .bind(each().map(|_| Uuid::new_v4()).collect::<Vec<Uuid>>())
    .bind(each().map(|e| e.organisation_id).collect::<Vec<Uuid>>())
    .bind(
        each()
            .map(|e| e.workspace_id)
            .collect::<Vec<Option<Uuid>>>(),
    )
    .bind(each().map(|e| e.event_type).collect::<Vec<&str>>())
    .bind(each().map(|e| e.actor.kind.as_str()).collect::<Vec<&str>>())
    .bind(each().map(|e| e.actor.id).collect::<Vec<Option<Uuid>>>())
    .bind(each().map(|e| e.target_kind).collect::<Vec<&str>>())
    .bind(each().map(|e| e.target_id).collect::<Vec<Uuid>>())
    .bind(
        each()
            .map(|e| e.correlation_id.as_str())
            .collect::<Vec<&str>>(),
    )
    .bind(
        each()
            .map(|e| e.occurred_at)
            .collect::<Vec<chrono::DateTime<chrono::Utc>>>(),
    )
    .bind(each().map(|e| e.data.to_string()).collect::<Vec<String>>())
    .bind(
        each()
            .map(|e| e.actor.token_id)
            .collect::<Vec<Option<Uuid>>>(),
    )
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(())
}
