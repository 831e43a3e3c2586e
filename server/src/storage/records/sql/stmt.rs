//! The statement the shared SQL builds and runs: sqlx's query, bound and run through the
//! backend's [`Dialect`]. Values and rows are the ones both backends encode and decode
//! ([`Param`], [`Rows`]), so the shared code states no bounds over `sqlx::Database`; a list
//! column is a [`List`] and a list parameter a [`ListParam`], which each backend stores its way
//! (an array on Postgres, JSON text on SQLite).

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgHasArrayType, PgRow, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentsBuffer, SqliteRow, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Encode, FromRow, Pool, Postgres, SqlSafeStr, Sqlite, Type};

use crate::storage::StoreError;
use crate::storage::records::dialect::{Conn, Dialect, Query};

/// A value both backends bind (`'t`: what it borrows, as in sqlx's `Encode<'t, _>`).
pub(crate) trait Param<'t>:
    Send + Encode<'t, Postgres> + Type<Postgres> + Encode<'t, Sqlite> + Type<Sqlite>
{
}

impl<'t, T> Param<'t> for T where
    T: Send + Encode<'t, Postgres> + Type<Postgres> + Encode<'t, Sqlite> + Type<Sqlite>
{
}

/// A row both backends decode.
pub(crate) trait Rows:
    Send + Unpin + 'static + for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow>
{
}

impl<T> Rows for T where
    T: Send + Unpin + 'static + for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow>
{
}

/// Where a statement runs: a transaction's connection or the pool.
pub(crate) enum On<'a, S: Dialect> {
    Conn(&'a mut Conn<S>),
    Pool(&'a Pool<S::DB>),
}

/// What a statement can run on ([`On`]).
pub(crate) trait Exec<'a, S: Dialect> {
    fn on(self) -> On<'a, S>;
}

impl<'a, S: Dialect> Exec<'a, S> for &'a mut Conn<S> {
    fn on(self) -> On<'a, S> {
        On::Conn(self)
    }
}

impl<'a, S: Dialect> Exec<'a, S> for &'a Pool<S::DB> {
    fn on(self) -> On<'a, S> {
        On::Pool(self)
    }
}

/// A statement of the shared SQL, as sqlx's query with its arguments.
pub(crate) struct Stmt<'q, S: Dialect> {
    query: Query<'q, S>,
}

/// What a write statement did.
pub(crate) struct Done(u64);

impl Done {
    pub(crate) fn new(rows_affected: u64) -> Self {
        Self(rows_affected)
    }

    pub(crate) fn rows_affected(&self) -> u64 {
        self.0
    }
}

impl<'q, S: Dialect> Stmt<'q, S> {
    pub(crate) fn new(sql: impl SqlSafeStr) -> Self {
        Self {
            query: sqlx::query(sql),
        }
    }

    pub(crate) fn from_query(query: Query<'q, S>) -> Self {
        Self { query }
    }

    pub(crate) fn bind<'t, T: Param<'t>>(self, value: T) -> Self {
        Self {
            query: S::bind(self.query, value),
        }
    }

    pub(crate) fn into_query(self) -> Query<'q, S> {
        self.query
    }

    pub(crate) fn execute(
        self,
        on: impl Exec<'q, S>,
    ) -> impl Future<Output = Result<Done, StoreError>> + Send {
        S::execute(self.query, on.on())
    }

    pub(crate) fn fetch_all<O: Rows>(
        self,
        on: impl Exec<'q, S>,
    ) -> impl Future<Output = Result<Vec<O>, StoreError>> + Send {
        S::fetch_all(self.query, on.on())
    }

    pub(crate) fn fetch_optional<O: Rows>(
        self,
        on: impl Exec<'q, S>,
    ) -> impl Future<Output = Result<Option<O>, StoreError>> + Send {
        S::fetch_optional(self.query, on.on())
    }

    pub(crate) async fn fetch_one<O: Rows>(self, on: impl Exec<'q, S>) -> Result<O, StoreError> {
        let on = on.on();
        S::fetch_optional(self.query, on)
            .await?
            .ok_or_else(|| StoreError::Internal("a statement returned no row".into()))
    }
}

/// A list column: an array on Postgres, a JSON array in text on SQLite.
#[derive(Debug)]
pub(crate) struct List<T>(pub(crate) Vec<T>);

impl<T> List<T> {
    pub(crate) fn into_vec(self) -> Vec<T> {
        self.0
    }
}

impl<T> Type<Postgres> for List<T>
where
    Vec<T>: Type<Postgres>,
{
    fn type_info() -> PgTypeInfo {
        <Vec<T> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Vec<T> as Type<Postgres>>::compatible(ty)
    }
}

impl<'r, T> Decode<'r, Postgres> for List<T>
where
    Vec<T>: Decode<'r, Postgres>,
{
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Self(<Vec<T> as Decode<'r, Postgres>>::decode(value)?))
    }
}

impl<T> Type<Sqlite> for List<T> {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty)
    }
}

impl<'r, T: DeserializeOwned> Decode<'r, Sqlite> for List<T> {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<'r, Sqlite>>::decode(value)?;
        Ok(Self(serde_json::from_str(text)?))
    }
}

/// A list parameter: an array on Postgres, a JSON array in text on SQLite.
pub(crate) struct ListParam<'a, T>(pub(crate) &'a [T]);

impl<T> Type<Postgres> for ListParam<'_, T>
where
    T: PgHasArrayType,
{
    fn type_info() -> PgTypeInfo {
        T::array_type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        T::array_compatible(ty)
    }
}

impl<'q, T> Encode<'q, Postgres> for ListParam<'_, T>
where
    for<'a> &'a [T]: Encode<'q, Postgres>,
{
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, BoxDynError> {
        <&[T] as Encode<'q, Postgres>>::encode_by_ref(&self.0, buf)
    }
}

impl<T> Type<Sqlite> for ListParam<'_, T> {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }
}

impl<'q, T: Serialize> Encode<'q, Sqlite> for ListParam<'_, T> {
    fn encode_by_ref(
        &self,
        buf: &mut SqliteArgumentsBuffer,
    ) -> Result<sqlx::encode::IsNull, BoxDynError> {
        <String as Encode<'q, Sqlite>>::encode(serde_json::to_string(self.0)?, buf)
    }
}

/// How an adapter's [`Dialect`] runs statements: one text for both backends, compiled inside
/// each `impl Dialect` against its own driver (sqlx's methods need the concrete row and
/// connection types), as `run_statements!(PgRow, PgConnection);`.
macro_rules! run_statements {
    ($row:ty, $conn:ty) => {
        fn bind<'q, 't, T: $crate::storage::records::sql::Param<'t>>(
            query: $crate::storage::records::dialect::Query<'q, Self>,
            value: T,
        ) -> $crate::storage::records::dialect::Query<'q, Self> {
            query.bind(value)
        }

        async fn execute<'q>(
            query: $crate::storage::records::dialect::Query<'q, Self>,
            on: $crate::storage::records::sql::On<'q, Self>,
        ) -> Result<$crate::storage::records::sql::Done, $crate::storage::StoreError> {
            use $crate::storage::records::sql::On;
            let done = match on {
                On::Conn(conn) => query.execute(conn).await,
                On::Pool(pool) => query.execute(pool).await,
            };
            let done = done.map_err(Self::map_err)?;
            Ok($crate::storage::records::sql::Done::new(
                done.rows_affected(),
            ))
        }

        async fn fetch_all<'q, O: $crate::storage::records::sql::Rows>(
            query: $crate::storage::records::dialect::Query<'q, Self>,
            on: $crate::storage::records::sql::On<'q, Self>,
        ) -> Result<Vec<O>, $crate::storage::StoreError> {
            use $crate::storage::records::sql::On;
            let query = query.try_map(|row: $row| O::from_row(&row));
            match on {
                On::Conn(conn) => query.fetch_all(conn).await,
                On::Pool(pool) => query.fetch_all(pool).await,
            }
            .map_err(Self::map_err)
        }

        async fn fetch_optional<'q, O: $crate::storage::records::sql::Rows>(
            query: $crate::storage::records::dialect::Query<'q, Self>,
            on: $crate::storage::records::sql::On<'q, Self>,
        ) -> Result<Option<O>, $crate::storage::StoreError> {
            use $crate::storage::records::sql::On;
            let query = query.try_map(|row: $row| O::from_row(&row));
            match on {
                On::Conn(conn) => query.fetch_optional(conn).await,
                On::Pool(pool) => query.fetch_optional(pool).await,
            }
            .map_err(Self::map_err)
        }

        fn decode_row<O: $crate::storage::records::sql::Rows>(
            row: &$row,
        ) -> Result<O, $crate::storage::StoreError> {
            O::from_row(row).map_err(Self::map_err)
        }

        fn fetch_rows<'q>(
            query: $crate::storage::records::dialect::Query<'q, Self>,
            conn: &'q mut $conn,
        ) -> futures_util::stream::BoxStream<'q, Result<$row, $crate::storage::StoreError>> {
            use futures_util::StreamExt as _;
            query
                .fetch(conn)
                .map(|row| row.map_err(Self::map_err))
                .boxed()
        }
    };
}

pub(crate) use run_statements;
