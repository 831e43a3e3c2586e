//! The audit log: writing one event (numbered after commit by `sequencer.rs`, which announces
//! it with NOTIFY on [`AUDIT_CHANNEL`]), and the activity page read through the read lane; the
//! rest is shared (`storage/sql/audit.rs`).

use sqlx::PgConnection;
use uuid::Uuid;

use self::shared::{EVENT_COLUMNS, EventRow};
use super::{PostgresStore, map_err};
use crate::domain::NewAuditEvent;
use crate::storage::StoreError;

// Compiled once per SQL backend (see the layout in `storage/mod.rs`).
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/audit.rs"]
mod shared;

pub(super) use self::shared::insert_events;

/// Channel on which new audit events are announced, as `<workspace id> <sequence>`.
pub const AUDIT_CHANNEL: &str = "cp_audit";

/// Writes one audit event without its sequence: the sequencer numbers it after the commit and
/// announces it on [`AUDIT_CHANNEL`] (`sequencer.rs`), so no write holds its workspace's counter
/// through its commit. One round trip.
pub(super) async fn insert_event(
    conn: &mut PgConnection,
    event: &NewAuditEvent,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO audit_events (id, organisation_id, workspace_id, event_type, actor_kind,
             actor_id, target_kind, target_id, correlation_id, occurred_at, data)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
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

/// Numbers every committed event still waiting (after a process died between its commit and
/// its sequencing pass).
async fn settle_events(store: &PostgresStore) -> Result<(), StoreError> {
    store.sequencer.settle(&store.pool).await
}

/// A page of a workspace's activity, newest first, through the read lane.
async fn list_events_page(
    store: &PostgresStore,
    workspace_id: Uuid,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<EventRow>, StoreError> {
    let query = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {EVENT_COLUMNS} FROM audit_events
         WHERE workspace_id = $1 AND seq IS NOT NULL AND ($2::bigint IS NULL OR seq < $2)
         ORDER BY seq DESC LIMIT $3"
    )))
    .bind(workspace_id)
    .bind(before)
    .bind(i64::from(limit));
    store.read_all(query).await
}
