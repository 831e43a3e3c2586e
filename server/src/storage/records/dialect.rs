//! The contract between the shared SQL (`sql/`) and the backend it runs on. The shared SQL is
//! generic over `S: Dialect` and reaches its backend only through it: running a statement
//! ([`sql::Stmt`](super::sql::Stmt) binds and runs through [`Dialect::bind`],
//! [`Dialect::execute`], [`Dialect::fetch_all`]…), the row-lock clauses, transactions, audit
//! events, the request path's reads, and the few statements whose SQL differs. Each adapter
//! implements it once (`postgres/dialect.rs`, `sqlite/dialect.rs`); why the values and rows
//! are the ones both backends encode rather than bounds over `sqlx::Database`:
//! `docs/decisions.md`.

use std::future::Future;

use chrono::{DateTime, Utc};
use futures_util::stream::BoxStream;
use sqlx::{Database, Pool, QueryBuilder};
use uuid::Uuid;

use super::copy::{Cell, Kind};
use super::rows::DeliveryRow;
use super::sql::{Done, On, Param, Rows, Stmt};
use super::write_tx::{PendingCommit, WriteTx};
use super::{DeliveryTransition, InsertTokenError, NewToken, StoreError};
use crate::domain::NewAuditEvent;
use crate::storage::WriteContext;

/// A backend's connection, as a transaction derefs to it.
pub(crate) type Conn<D> = <<D as Dialect>::DB as Database>::Connection;
/// A backend's row.
pub(crate) type RowOf<D> = <<D as Dialect>::DB as Database>::Row;
/// sqlx's query on a backend, with its arguments.
pub(crate) type Query<'q, D> =
    sqlx::query::Query<'q, <D as Dialect>::DB, <<D as Dialect>::DB as Database>::Arguments>;

/// One token issuance, as the shared SQL hands it to a backend's batch.
#[derive(Clone, Copy)]
pub(crate) struct Issuance<'a> {
    pub(crate) token: &'a NewToken,
    pub(crate) events: &'a [NewAuditEvent],
    pub(crate) max_active: u32,
    pub(crate) now: DateTime<Utc>,
}

/// A failed migration as a [`StoreError`]: a statement's failure as the backend maps it.
pub(crate) fn migration_failed<S: Dialect>(e: sqlx::migrate::MigrateError) -> StoreError {
    match e {
        sqlx::migrate::MigrateError::Execute(inner) => S::map_err(inner),
        other => StoreError::Internal(other.to_string()),
    }
}

/// What the shared SQL needs of a backend. Each adapter implements it once (`postgres/dialect.rs`,
/// `sqlite/dialect.rs`).
pub(crate) trait Dialect: Sized + Send + Sync + 'static {
    type DB: Database;

    /// The row lock a check-then-write takes on the rows it reads. Empty on SQLite, whose
    /// write transactions hold the database's write lock from their start.
    const FOR_UPDATE: &'static str;
    const FOR_SHARE: &'static str;
    /// Leasing due deliveries skips the rows another replica is leasing instead of waiting.
    const LEASE_LOCK: &'static str;
    /// A token's columns (`t`), its active grants as a list in grant order.
    const TOKEN_COLUMNS: &'static str;
    /// Inserts a token (`$1`..`$11`: id, public id, user, organisation, name, secret hash,
    /// scopes, environments, created, expires, issuer) and, where the backend can in the same
    /// statement, its grants (`$12`, in grant order).
    const INSERT_TOKEN: &'static str;
    /// Inserts the grants (`$1` token, `$2` workspaces in grant order) when
    /// [`Self::INSERT_TOKEN`] does not.
    const INSERT_GRANTS: Option<&'static str>;

    fn map_err(e: sqlx::Error) -> StoreError;
    /// The predicate `<column> <this>`: the column is one of the uuids bound as `param` (a
    /// [`ListParam`](super::sql::ListParam)).
    fn in_uuid_list(param: &str) -> String;
    fn pool(&self) -> &Pool<Self::DB>;

    /// A statement of the shared SQL.
    fn query<'q>(sql: impl sqlx::SqlSafeStr) -> Stmt<'q, Self> {
        Stmt::new(sql)
    }
    fn bind<'q, 't, T: Param<'t>>(query: Query<'q, Self>, value: T) -> Query<'q, Self>;
    fn execute<'q>(
        query: Query<'q, Self>,
        on: On<'q, Self>,
    ) -> impl Future<Output = Result<Done, StoreError>> + Send + 'q;
    fn fetch_all<'q, O: Rows>(
        query: Query<'q, Self>,
        on: On<'q, Self>,
    ) -> impl Future<Output = Result<Vec<O>, StoreError>> + Send + 'q;
    fn fetch_optional<'q, O: Rows>(
        query: Query<'q, Self>,
        on: On<'q, Self>,
    ) -> impl Future<Output = Result<Option<O>, StoreError>> + Send + 'q;
    fn decode_row<O: Rows>(row: &RowOf<Self>) -> Result<O, StoreError>;
    /// Rows one by one, undecoded (`store copy`).
    fn fetch_rows<'q>(
        query: Query<'q, Self>,
        conn: &'q mut Conn<Self>,
    ) -> BoxStream<'q, Result<RowOf<Self>, StoreError>>;

    /// Begins a write transaction for `write`, first committing one its keyed request still
    /// holds (`storage/write_context.rs`).
    fn begin(
        &self,
        write: &WriteContext,
    ) -> impl Future<Output = Result<WriteTx<Self::DB>, StoreError>> + Send;
    /// Begins a transaction whose statements all see one snapshot, so a record read in
    /// several statements is of one moment. Only reads belong in it (Postgres refuses a
    /// write; SQLite does not check). `store copy` takes its snapshot here too and lifts the
    /// statement timeout itself: a deadline added here would stop long copies.
    fn begin_snapshot(
        &self,
    ) -> impl Future<Output = Result<sqlx::Transaction<'static, Self::DB>, StoreError>> + Send;
    /// What announcing a commit needs of the store, taken when the transaction is done.
    type Announcer: Send + 'static;
    fn announcer(&self) -> Self::Announcer;
    /// After a commit that wrote events of `workspaces` (perhaps none): Postgres numbers them
    /// (and announces them by NOTIFY), SQLite announces them in process.
    fn announce(
        announcer: Self::Announcer,
        workspaces: Vec<Uuid>,
    ) -> impl Future<Output = ()> + Send;
    /// Commits, or parks the transaction for its outcome when `write` holds.
    fn commit(
        &self,
        tx: WriteTx<Self::DB>,
        write: &WriteContext,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let pending = PendingCommit::<Self> {
            tx,
            announcer: self.announcer(),
        };
        write.commit_or_hold(pending)
    }

    /// Runs one of the request path's reads (on Postgres through its read pool: no ping, and a
    /// client-side deadline).
    fn read_all<O: Rows>(
        &self,
        query: Stmt<'_, Self>,
    ) -> impl Future<Output = Result<Vec<O>, StoreError>> + Send;
    /// [`Self::read_all`] of a statement that returns at most one row.
    fn read_optional<O: Rows>(
        &self,
        query: Stmt<'_, Self>,
    ) -> impl Future<Output = Result<Option<O>, StoreError>> + Send {
        async move { Ok(self.read_all(query).await?.into_iter().next()) }
    }

    /// Writes one audit event in `tx`, noting its workspace for the announcement at commit.
    fn insert_event(
        tx: &mut WriteTx<Self::DB>,
        event: &NewAuditEvent,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Writes events in their order.
    fn insert_events(
        tx: &mut WriteTx<Self::DB>,
        events: &[NewAuditEvent],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Numbers every committed event still waiting for its sequence.
    fn number_waiting_events(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Runs an issuance with others; `None` when it must run alone.
    fn batch_insert_token(
        &self,
        _write: &WriteContext,
        _issuance: Issuance<'_>,
    ) -> impl Future<Output = Option<Result<(), InsertTokenError>>> + Send {
        async { None }
    }
    /// Runs a runner's report with others; `None` when it must run alone.
    fn batch_transition_delivery(
        &self,
        _write: &WriteContext,
        _t: &DeliveryTransition,
    ) -> impl Future<Output = Option<Result<Option<DeliveryRow>, StoreError>>> + Send {
        async { None }
    }

    /// Tells every replica, at commit, that the policies changed.
    fn policy_changed(conn: &mut Conn<Self>)
    -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Serialises new versions of the policy `name` until commit.
    fn serialise_versions(
        conn: &mut Conn<Self>,
        name: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// `store copy`: how a column of `kind` is selected, decoded and bound.
    fn select_column(name: &str, _kind: Kind) -> String {
        name.to_owned()
    }
    fn decode_cell(row: &RowOf<Self>, i: usize, kind: Kind) -> Result<Cell, StoreError>;
    fn push_cell(query: &mut QueryBuilder<Self::DB>, cell: Cell) -> Result<(), StoreError>;
}
