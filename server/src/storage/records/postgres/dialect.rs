//! Postgres's side of the shared SQL's contract (`records/dialect.rs`): statements run on a
//! connection or the pool, row locks, transactions whose events are numbered after their commit
//! (`throughput/event_numbering.rs`), the request path's reads through the read pool, and
//! issuances and reports gathered into batches (`tokens.rs`, `runners.rs`).

use sqlx::postgres::{PgPool, PgRow};
use sqlx::{PgConnection, Postgres, QueryBuilder};

use std::sync::Arc;

use uuid::Uuid;

use super::throughput::Sequencer;
use super::{
    PostgresStore, WriteTx, audit, copy, map_err, policies, runners, settle_after_commit, tokens,
};
use crate::domain::NewAuditEvent;
use crate::storage::records::copy::{Cell, Kind};
use crate::storage::records::dialect::{Dialect, Issuance};
use crate::storage::records::rows::DeliveryRow;
use crate::storage::records::sql::{Rows, Stmt, run_statements};
use crate::storage::{DeliveryTransition, InsertTokenError, StoreError, WriteContext};

impl Dialect for PostgresStore {
    type DB = Postgres;

    const FOR_UPDATE: &'static str = "FOR UPDATE";
    const FOR_SHARE: &'static str = "FOR SHARE";
    const LEASE_LOCK: &'static str = "FOR UPDATE OF d SKIP LOCKED";
    const TOKEN_COLUMNS: &'static str = tokens::TOKEN_COLUMNS;
    const INSERT_TOKEN: &'static str = tokens::INSERT_TOKEN;
    const INSERT_GRANTS: Option<&'static str> = None;

    fn map_err(e: sqlx::Error) -> StoreError {
        map_err(e)
    }

    fn in_uuid_list(param: &str) -> String {
        format!("= ANY({param})")
    }

    fn pool(&self) -> &PgPool {
        &self.pool
    }

    run_statements!(PgRow, PgConnection);

    async fn begin(&self, write: &WriteContext) -> Result<WriteTx, StoreError> {
        write.before_begin().await?;
        let tx = self.pool.begin().await.map_err(map_err)?;
        Ok(WriteTx::new(tx, None))
    }

    async fn begin_snapshot(&self) -> Result<sqlx::Transaction<'static, Postgres>, StoreError> {
        self.pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(map_err)
    }

    type Announcer = (Arc<Sequencer>, PgPool);

    fn announcer(&self) -> Self::Announcer {
        (self.sequencer.clone(), self.pool.clone())
    }

    /// A transaction that wrote workspace events returns once they are numbered (the
    /// sequencer's pass announces them by NOTIFY), so its writer reads them back at once.
    async fn announce(numbering: Self::Announcer, workspaces: Vec<Uuid>) {
        let (sequencer, pool) = numbering;
        settle_after_commit(&sequencer, &pool, &workspaces).await;
    }

    /// Through the read pool (`throughput/read_pool.rs`): no pool ping, and a client-side
    /// deadline.
    async fn read_all<O: Rows>(&self, query: Stmt<'_, Self>) -> Result<Vec<O>, StoreError> {
        let query = query.into_query().try_map(|row: PgRow| O::from_row(&row));
        let mut lease = self.reads.lease().await?;
        let outcome =
            tokio::time::timeout(self.reads.deadline(), query.fetch_all(lease.conn()?)).await;
        lease.settle(outcome)
    }

    async fn insert_event(tx: &mut WriteTx, event: &NewAuditEvent) -> Result<(), StoreError> {
        audit::insert_event(tx, event).await
    }

    async fn insert_events(tx: &mut WriteTx, events: &[NewAuditEvent]) -> Result<(), StoreError> {
        audit::insert_events(tx, events).await
    }

    async fn number_waiting_events(&self) -> Result<(), StoreError> {
        self.sequencer.sweep(&self.pool).await
    }

    async fn batch_insert_token(
        &self,
        write: &WriteContext,
        issuance: Issuance<'_>,
    ) -> Option<Result<(), InsertTokenError>> {
        tokens::batch_insert_token(self, write, issuance).await
    }

    async fn batch_transition_delivery(
        &self,
        write: &WriteContext,
        t: &DeliveryTransition,
    ) -> Option<Result<Option<DeliveryRow>, StoreError>> {
        runners::batch_transition_delivery(self, write, t).await
    }

    async fn policy_changed(conn: &mut PgConnection) -> Result<(), StoreError> {
        policies::policy_changed(conn).await
    }

    async fn serialise_versions(conn: &mut PgConnection, name: &str) -> Result<(), StoreError> {
        policies::serialise_versions(conn, name).await
    }

    fn select_column(name: &str, kind: Kind) -> String {
        copy::select_column(name, kind)
    }

    fn decode_cell(row: &PgRow, i: usize, kind: Kind) -> Result<Cell, StoreError> {
        copy::decode(row, i, kind)
    }

    fn push_cell(query: &mut QueryBuilder<Postgres>, cell: Cell) -> Result<(), StoreError> {
        copy::push_cell(query, cell)
    }
}
