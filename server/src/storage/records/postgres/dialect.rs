//! Postgres's side of the shared SQL's contract (`records/dialect.rs`): lists as arrays, JSON as
//! jsonb, row locks, transactions whose events are numbered after their commit
//! (`throughput/event_numbering.rs`), the request path's reads through the read pool, and
//! issuances and reports gathered into batches (`tokens.rs`, `runners.rs`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::postgres::PgRow;
use sqlx::{FromRow, PgConnection, Postgres, QueryBuilder};

use super::{
    PendingCommit, PostgresStore, WriteTx, audit, copy, map_err, policies, runners, tokens,
};
use crate::domain::NewAuditEvent;
use crate::storage::records::copy::{Cell, Kind};
use crate::storage::records::dialect::{Dialect, ReadQuery};
use crate::storage::records::rows::DeliveryRow;
use crate::storage::{DeliveryTransition, InsertTokenError, NewToken, StoreError, WriteContext};

impl Dialect for PostgresStore {
    type DB = Postgres;
    type List<T> = Vec<T>;
    type ListParam<'a, T: 'a> = &'a [T];
    type Json = serde_json::Value;

    const FOR_UPDATE: &'static str = "FOR UPDATE";
    const FOR_SHARE: &'static str = "FOR SHARE";
    const LEASE_LOCK: &'static str = "FOR UPDATE OF d SKIP LOCKED";
    const TOKEN_COLUMNS: &'static str = tokens::TOKEN_COLUMNS;

    fn map_err(e: sqlx::Error) -> StoreError {
        map_err(e)
    }

    fn list_param<T: Serialize>(list: &[T]) -> Result<&[T], StoreError> {
        Ok(list)
    }

    fn decode_list<T: DeserializeOwned>(raw: Vec<T>) -> Result<Vec<T>, StoreError> {
        Ok(raw)
    }

    fn json_param<T: Serialize + ?Sized>(value: &T) -> Result<serde_json::Value, StoreError> {
        Ok(serde_json::to_value(value).unwrap_or(serde_json::Value::Null))
    }

    fn in_uuid_list(param: &str) -> String {
        format!("= ANY({param})")
    }

    async fn begin(&self, write: &WriteContext) -> Result<WriteTx, StoreError> {
        write.before_begin().await?;
        let tx = self.pool.begin().await.map_err(map_err)?;
        Ok(WriteTx::new(tx, None))
    }

    /// A transaction that wrote workspace events returns once they are numbered (the
    /// sequencer's pass announces them by NOTIFY), so its writer reads them back at once.
    async fn commit(&self, tx: WriteTx, write: &WriteContext) -> Result<(), StoreError> {
        let pending = PendingCommit {
            numbering: (!tx.workspaces.is_empty())
                .then(|| (self.sequencer.clone(), self.pool.clone())),
            tx: tx.tx,
        };
        write.commit_or_hold(pending).await
    }

    /// Through the read pool (`throughput/read_pool.rs`): no pool ping, and a client-side
    /// deadline.
    async fn read_all<O>(&self, query: ReadQuery<'_, Self, O>) -> Result<Vec<O>, StoreError>
    where
        O: Send + Unpin + for<'r> FromRow<'r, PgRow>,
    {
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
        self.sequencer.settle(&self.pool).await
    }

    async fn insert_token_rows(
        conn: &mut PgConnection,
        token: &NewToken,
    ) -> Result<(), StoreError> {
        tokens::insert_token_rows(conn, token).await
    }

    async fn batch_insert_token(
        &self,
        write: &WriteContext,
        token: &NewToken,
        events: &[NewAuditEvent],
        max_active: u32,
        now: DateTime<Utc>,
    ) -> Option<Result<(), InsertTokenError>> {
        tokens::batch_insert_token(self, write, token, events, max_active, now).await
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
