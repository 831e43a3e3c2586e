//! The test's own view of its stores, beside the server's: a connection to its records store
//! on whichever backend the run uses ([`TestDb`], queried with [`sql_one!`], [`sql_all!`] and
//! [`sql_exec!`]), the audit events about a target, and the Redis keys under its prefix.

use std::time::Duration;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, PgConnection, SqliteConnection};
use uuid::Uuid;

use super::needs::sqlite_path;
use super::server::TestApp;

impl TestApp {
    /// A connection of its own to the test's records store, for [`sql_one!`], [`sql_all!`] and
    /// [`sql_exec!`].
    pub async fn db(&self) -> TestDb {
        match sqlite_path(&self.database_url) {
            Some(path) => {
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .busy_timeout(Duration::from_secs(5));
                TestDb::Sqlite(
                    SqliteConnection::connect_with(&options)
                        .await
                        .expect("open the test database"),
                )
            }
            None => TestDb::Pg(
                PgConnection::connect(&self.database_url)
                    .await
                    .expect("connect to the test database"),
            ),
        }
    }
}

/// A connection to a test's records store, on whichever backend the run uses.
///
/// Query it with [`sql_one!`], [`sql_all!`] and [`sql_exec!`]. Their SQL must be valid on both
/// backends: `$1` parameters, no `::` casts, no `= ANY`, no backend-only functions. Uuids bind
/// and decode as `Uuid` on both; read a JSON column as `CAST(data AS TEXT)` into a `String`
/// and parse it with serde_json.
pub enum TestDb {
    Pg(PgConnection),
    Sqlite(SqliteConnection),
}

/// `sql_fetch!(fetch_one, db, (i64,), "SELECT ... WHERE id = $1", id)`: runs the query on `db`
/// (a `&mut TestDb`), binding every argument for the backend in use, and fetches rows of the
/// given type with the given method. The result is the method's `Result`.
macro_rules! sql_fetch {
    ($fetch:ident, $db:expr, $row:ty, $sql:expr $(, $arg:expr)* $(,)?) => {
        match $db {
            $crate::support::TestDb::Pg(conn) => {
                sqlx::query_as::<sqlx::Postgres, $row>($sql)
                    $(.bind($arg))*
                    .$fetch(conn)
                    .await
            }
            $crate::support::TestDb::Sqlite(conn) => {
                sqlx::query_as::<sqlx::Sqlite, $row>($sql)
                    $(.bind($arg))*
                    .$fetch(conn)
                    .await
            }
        }
    };
}
pub(crate) use sql_fetch;

/// `sql_one!(&mut db, (i64,), "SELECT count(*) FROM t WHERE id = $1", id)`: exactly one row.
macro_rules! sql_one {
    ($($tokens:tt)*) => {
        $crate::support::sql_fetch!(fetch_one, $($tokens)*)
    };
}
pub(crate) use sql_one;

/// `sql_all!(&mut db, (String,), "SELECT state FROM t")`: every row.
macro_rules! sql_all {
    ($($tokens:tt)*) => {
        $crate::support::sql_fetch!(fetch_all, $($tokens)*)
    };
}
pub(crate) use sql_all;

/// `sql_value!(app, i64, "SELECT count(*) FROM t WHERE id = $1", id)`: the one value of the
/// one row, read through a connection of its own to `app`'s records store.
macro_rules! sql_value {
    ($app:expr, $ty:ty, $($tokens:tt)*) => {
        $crate::support::sql_one!(&mut $app.db().await, ($ty,), $($tokens)*).unwrap().0
    };
}
pub(crate) use sql_value;

/// `sql_exec!(&mut db, "UPDATE t SET a = $1 WHERE id = $2", a, id)`: runs a statement and
/// returns `Result<u64, sqlx::Error>`, the number of rows it affected.
macro_rules! sql_exec {
    ($db:expr, $sql:expr $(, $arg:expr)* $(,)?) => {
        match $db {
            $crate::support::TestDb::Pg(conn) => sqlx::query::<sqlx::Postgres>($sql)
                $(.bind($arg))*
                .execute(conn)
                .await
                .map(|done| done.rows_affected()),
            $crate::support::TestDb::Sqlite(conn) => sqlx::query::<sqlx::Sqlite>($sql)
                $(.bind($arg))*
                .execute(conn)
                .await
                .map(|done| done.rows_affected()),
        }
    };
}
pub(crate) use sql_exec;

/// The audit events of `event_type` about `target`: how many, and how many are numbered.
pub async fn events_about(app: &TestApp, event_type: &str, target: Uuid) -> (i64, i64) {
    sql_one!(
        &mut app.db().await,
        (i64, i64),
        "SELECT count(*), count(seq) FROM audit_events WHERE event_type = $1 AND target_id = $2",
        event_type,
        target
    )
    .unwrap()
}

/// (actor kind, actor id, actor token id) of the one event of `event_type` about `target`.
pub async fn event_actor(
    app: &TestApp,
    event_type: &str,
    target: Uuid,
) -> (String, Option<Uuid>, Option<Uuid>) {
    sql_one!(
        &mut app.db().await,
        (String, Option<Uuid>, Option<Uuid>),
        "SELECT actor_kind, actor_id, actor_token_id FROM audit_events
         WHERE event_type = $1 AND target_id = $2",
        event_type,
        target
    )
    .unwrap()
}

/// A connection to the Redis or the cluster a `REDIS_URL` names, as the server opens it: on a
/// cluster `KEYS` asks every master and a `DEL` of keys in several slots is split by slot.
async fn redis_connection(url: &str) -> Option<control_plane::storage::RedisConnection> {
    let location = control_plane::storage::RedisLocation::parse(url).ok()?;
    control_plane::storage::RedisConnection::open(&location, Duration::from_secs(5))
        .await
        .ok()
}

/// Every key under `prefix`, with its raw value.
pub async fn redis_values(url: &str, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let Some(mut conn) = redis_connection(url).await else {
        return vec![];
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    let mut out = Vec::new();
    for key in keys {
        let value: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap_or(None);
        if let Some(value) = value {
            out.push((key, value));
        }
    }
    out
}

/// Deletes every key under `prefix`: what a Redis restart without persistence does.
pub async fn delete_redis_keys(url: &str, prefix: &str) {
    let Some(mut conn) = redis_connection(url).await else {
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: Result<i64, _> = redis::cmd("DEL").arg(keys).query_async(&mut conn).await;
    }
}
