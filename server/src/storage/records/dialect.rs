//! The contract between the shared SQL (`sql/`) and the backend it runs on. `sql/` is compiled
//! inside each adapter (one `#[path = "../sql/mod.rs"] mod sql;` in `postgres/mod.rs` and in
//! `sqlite/mod.rs`) and reaches its backend only through `Store: Dialect`: the column and
//! parameter types that differ, the row-lock clauses, transactions, audit events, the request
//! path's reads, and the few statements whose SQL differs. The compiler holds both adapters to
//! this trait; the shared statements are checked against each backend's types where they are
//! compiled. Why the shared SQL is not generic over `sqlx::Database`: `docs/decisions.md`.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::query::QueryAs;
use sqlx::{Database, FromRow, QueryBuilder};

use super::copy::{Cell, Kind};
use super::rows::DeliveryRow;
use super::write_tx::WriteTx;
use super::{DeliveryTransition, InsertTokenError, NewToken, StoreError};
use crate::domain::NewAuditEvent;
use crate::storage::WriteContext;

/// A backend's connection, as a transaction derefs to it.
pub(crate) type Conn<D> = <<D as Dialect>::DB as Database>::Connection;
/// A backend's row.
pub(crate) type RowOf<D> = <<D as Dialect>::DB as Database>::Row;
/// One of the request path's reads, before it runs ([`Dialect::read_all`]).
pub(crate) type ReadQuery<'q, D, O> =
    QueryAs<'q, <D as Dialect>::DB, O, <<D as Dialect>::DB as Database>::Arguments>;

/// What the shared SQL needs of a backend. Each adapter implements it once (`postgres/dialect.rs`,
/// `sqlite/dialect.rs`).
pub(crate) trait Dialect: Sized + Send + Sync + 'static {
    type DB: Database;
    /// A list column as it decodes: an array on Postgres, JSON text on SQLite.
    type List<T>;
    /// A list as it binds.
    type ListParam<'a, T: 'a>;
    /// A JSON document as it binds: jsonb on Postgres, text on SQLite.
    type Json;

    /// The row lock a check-then-write takes on the rows it reads. Empty on SQLite, whose
    /// write transactions hold the database's write lock from their start.
    const FOR_UPDATE: &'static str;
    const FOR_SHARE: &'static str;
    /// Leasing due deliveries skips the rows another replica is leasing instead of waiting.
    const LEASE_LOCK: &'static str;
    /// A token's columns (`t`), its active grants as a list in grant order.
    const TOKEN_COLUMNS: &'static str;

    fn map_err(e: sqlx::Error) -> StoreError;
    fn list_param<T: Serialize>(list: &[T]) -> Result<Self::ListParam<'_, T>, StoreError>;
    fn decode_list<T: DeserializeOwned>(raw: Self::List<T>) -> Result<Vec<T>, StoreError>;
    fn json_param<T: Serialize + ?Sized>(value: &T) -> Result<Self::Json, StoreError>;
    /// The predicate `<column> <this>`: the column is one of the uuids bound as `param`
    /// ([`Self::list_param`]).
    fn in_uuid_list(param: &str) -> String;

    /// Begins a write transaction for `write`, first committing one its keyed request still
    /// holds (`storage/write_context.rs`).
    fn begin(
        &self,
        write: &WriteContext,
    ) -> impl Future<Output = Result<WriteTx<Self::DB>, StoreError>> + Send;
    /// Commits, or parks the transaction for its outcome when `write` holds; the workspaces
    /// whose events it wrote are announced once it commits.
    fn commit(
        &self,
        tx: WriteTx<Self::DB>,
        write: &WriteContext,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Runs one of the request path's reads (on Postgres through its read pool: no ping, and a
    /// client-side deadline).
    fn read_all<O>(
        &self,
        query: ReadQuery<'_, Self, O>,
    ) -> impl Future<Output = Result<Vec<O>, StoreError>> + Send
    where
        O: Send + Unpin + for<'r> FromRow<'r, RowOf<Self>>;
    /// [`Self::read_all`] of a statement that returns at most one row.
    fn read_optional<O>(
        &self,
        query: ReadQuery<'_, Self, O>,
    ) -> impl Future<Output = Result<Option<O>, StoreError>> + Send
    where
        O: Send + Unpin + for<'r> FromRow<'r, RowOf<Self>>,
    {
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

    /// Inserts a token and its grants.
    fn insert_token_rows(
        conn: &mut Conn<Self>,
        token: &NewToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Runs an issuance with others; `None` when it must run alone.
    fn batch_insert_token(
        &self,
        _write: &WriteContext,
        _token: &NewToken,
        _events: &[NewAuditEvent],
        _max_active: u32,
        _now: DateTime<Utc>,
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
