//! SQLite's side of the shared SQL's contract (`records/dialect.rs`): no row locks (a write transaction holds the database's write lock from its `BEGIN
//! IMMEDIATE`, which orders every check-then-write), this process's writers taking turns, and
//! audit events numbered as they are written. Every issuance and report runs alone: there is
//! one writer and no round trip to save.

use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use tokio::sync::broadcast;
use uuid::Uuid;

use super::{BUSY_TIMEOUT, Change, SqliteStore, WriteTx, announce, audit, copy, map_err};
use crate::domain::NewAuditEvent;
use crate::storage::records::copy::{Cell, Kind};
use crate::storage::records::dialect::Dialect;
use crate::storage::records::sql::{Rows, Stmt, run_statements};
use crate::storage::{StoreError, WriteContext};

/// Active grants in grant order, as a JSON array of hex uuids (JSON cannot hold BLOBs).
const TOKEN_COLUMNS: &str = "t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    (SELECT json_group_array(lower(hex(tw.workspace_id)) ORDER BY tw.position)
     FROM token_workspaces tw
     WHERE tw.token_id = t.id AND tw.revoked_at IS NULL) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at, t.issued_by_token_id,
    t.last_used_at, t.last_used_address, t.last_used_agent";

impl Dialect for SqliteStore {
    type DB = Sqlite;

    const FOR_UPDATE: &'static str = "";
    const FOR_SHARE: &'static str = "";
    const LEASE_LOCK: &'static str = "";
    const TOKEN_COLUMNS: &'static str = TOKEN_COLUMNS;
    const INSERT_TOKEN: &'static str =
        "INSERT INTO tokens (id, public_id, user_id, organisation_id,
             name, secret_hash, scopes, environment_ids, created_at, expires_at, issued_by_token_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
    /// json_each's key is the array index, the grant's position.
    const INSERT_GRANTS: Option<&'static str> = Some(
        "INSERT INTO token_workspaces (token_id, workspace_id, position)
         SELECT $1, unhex(replace(value, '-', '')), key FROM json_each($2)",
    );

    fn map_err(e: sqlx::Error) -> StoreError {
        map_err(e)
    }

    fn in_uuid_list(param: &str) -> String {
        format!("IN (SELECT unhex(replace(value, '-', '')) FROM json_each({param}))")
    }

    fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    run_statements!(SqliteRow, SqliteConnection);

    async fn begin(&self, write: &WriteContext) -> Result<WriteTx, StoreError> {
        write.before_begin().await?;
        let turn = tokio::time::timeout(BUSY_TIMEOUT, self.writers.clone().lock_owned())
            .await
            .map_err(|_| {
                StoreError::Unavailable("timed out waiting for the writer's turn".into())
            })?;
        let tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_err)?;
        Ok(WriteTx::new(tx, Some(turn)))
    }

    /// A deferred transaction: its first read fixes the snapshot every later read sees (WAL).
    async fn begin_snapshot(&self) -> Result<sqlx::Transaction<'static, Sqlite>, StoreError> {
        self.pool.begin().await.map_err(map_err)
    }

    type Announcer = broadcast::Sender<Change>;

    fn announcer(&self) -> Self::Announcer {
        self.announced.clone()
    }

    async fn announce(announced: Self::Announcer, workspaces: Vec<Uuid>) {
        announce(&announced, workspaces.into_iter());
    }

    async fn read_all<O: Rows>(&self, query: Stmt<'_, Self>) -> Result<Vec<O>, StoreError> {
        query.fetch_all(&self.pool).await
    }

    async fn insert_event(tx: &mut WriteTx, event: &NewAuditEvent) -> Result<(), StoreError> {
        audit::insert_event(tx, event).await
    }

    async fn insert_events(tx: &mut WriteTx, events: &[NewAuditEvent]) -> Result<(), StoreError> {
        for event in events {
            audit::insert_event(tx, event).await?;
        }
        Ok(())
    }

    /// Nothing waits: each event is numbered as it is inserted, under the single writer.
    async fn number_waiting_events(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn policy_changed(conn: &mut SqliteConnection) -> Result<(), StoreError> {
        sqlx::query("UPDATE policy_state SET generation = generation + 1 WHERE id = 1")
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// Nothing to do: the write lock, held since BEGIN IMMEDIATE, serialises versions of one
    /// name.
    async fn serialise_versions(
        _conn: &mut SqliteConnection,
        _name: &str,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    fn decode_cell(row: &SqliteRow, i: usize, kind: Kind) -> Result<Cell, StoreError> {
        copy::decode(row, i, kind)
    }

    fn push_cell(query: &mut QueryBuilder<Sqlite>, cell: Cell) -> Result<(), StoreError> {
        copy::push_cell(query, cell)
    }
}
