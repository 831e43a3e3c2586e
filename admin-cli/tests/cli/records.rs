//! Each test's own records store, on the backend the run chose as the HTTP suite chooses its
//! records: an SQLite file with `TEST_RECORDS=sqlite`, otherwise a Postgres database, or, when
//! Postgres does not answer and services are not required, an SQLite file (said once). A
//! Postgres database is named `cp_cli_<uuid>`; an SQLite file is `cp.db` in a directory of its
//! own under `<temp>/cp-tests/`. Either is removed when the [`Db`] is dropped. Tests reach the
//! store directly through [`TestDb`] with `sql_one!`, `sql_all!` and `sql_exec!`, whose SQL
//! holds on both backends.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, Executor, PgConnection, SqliteConnection};

use crate::services::{self, postgres_base as base};

/// The records store a run's tests use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// The backend of this run, chosen once: SQLite with `TEST_RECORDS=sqlite`; Postgres when it
/// answers; otherwise SQLite, said once (a failure instead under `CP_TEST_REQUIRE_SERVICES=1`).
pub fn backend() -> Backend {
    static BACKEND: OnceLock<Backend> = OnceLock::new();
    *BACKEND.get_or_init(|| {
        if std::env::var("TEST_RECORDS").is_ok_and(|v| v == "sqlite") {
            return Backend::Sqlite;
        }
        if services::answers(&base()) {
            return Backend::Postgres;
        }
        let what = format!("Postgres at {} does not answer", services::address(&base()));
        services::missing(&what);
        services::say(&format!(
            "{what}: the CLI tests run on SQLite records instead (set {}=1 to fail instead)",
            services::REQUIRE_VAR
        ));
        Backend::Sqlite
    })
}

/// A fresh records store of the run's backend for one test, empty until `cpctl` first opens
/// (and migrates) it.
pub struct Db {
    /// What `cpctl` gets as `DATABASE_URL`.
    pub url: String,
    place: Place,
}

/// What to remove after the test.
enum Place {
    /// The database's name.
    Postgres(String),
    /// The directory holding the file (and its key-encryption key).
    Sqlite(PathBuf),
}

impl Db {
    pub async fn new() -> Self {
        match backend() {
            Backend::Sqlite => {
                let dir = sqlite_root().join(uuid::Uuid::new_v4().simple().to_string());
                std::fs::create_dir_all(&dir).expect("create the test database directory");
                Self {
                    url: format!("sqlite://{}", dir.join("cp.db").display()),
                    place: Place::Sqlite(dir),
                }
            }
            Backend::Postgres => {
                let name = format!("cp_cli_{}", uuid::Uuid::new_v4().simple());
                let mut admin = PgConnection::connect(&format!("{}/postgres", base()))
                    .await
                    .expect("connect to Postgres");
                admin
                    .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .await
                    .expect("create the test database");
                Self {
                    url: format!("{}/{name}", base()),
                    place: Place::Postgres(name),
                }
            }
        }
    }

    pub fn backend(&self) -> Backend {
        match self.place {
            Place::Postgres(_) => Backend::Postgres,
            Place::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// The first text on Postgres, the second on SQLite: for the few statements whose SQL
    /// differs (array literals).
    pub fn either(&self, postgres: &'static str, sqlite: &'static str) -> &'static str {
        match self.backend() {
            Backend::Postgres => postgres,
            Backend::Sqlite => sqlite,
        }
    }

    /// A connection of the test's own to the store, beside `cpctl`'s (which creates the schema:
    /// connect after the first `cpctl` command).
    pub async fn conn(&self) -> TestDb {
        match &self.place {
            Place::Sqlite(dir) => {
                let options = SqliteConnectOptions::new()
                    .filename(dir.join("cp.db"))
                    .busy_timeout(Duration::from_secs(5));
                TestDb::Sqlite(
                    SqliteConnection::connect_with(&options)
                        .await
                        .expect("open the test database"),
                )
            }
            Place::Postgres(_) => TestDb::Pg(
                PgConnection::connect(&self.url)
                    .await
                    .expect("connect to the test database"),
            ),
        }
    }

    /// Runs one statement without parameters, in SQL both backends read the same.
    pub async fn exec(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match &mut self.conn().await {
            TestDb::Pg(conn) => conn.execute(sql).await.map(drop),
            TestDb::Sqlite(conn) => conn.execute(sql).await.map(drop),
        }
        .expect("statement");
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let name = match &self.place {
            Place::Sqlite(dir) => {
                // Only ever a directory `new` made under the root: never anything else.
                if dir.starts_with(sqlite_root()) {
                    let _ = std::fs::remove_dir_all(dir);
                }
                return;
            }
            Place::Postgres(name) => name.clone(),
        };
        // Async drop does not exist: drop the database on a thread with a runtime of its own
        // (the test's runtime is the one this drop blocks).
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(mut admin) = PgConnection::connect(&format!("{}/postgres", base())).await
                {
                    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = admin.execute(sqlx::AssertSqlSafe(drop)).await;
                }
            });
        })
        .join();
    }
}

/// The directory under which each SQLite test keeps its store, one directory per test (the
/// HTTP suite's too).
fn sqlite_root() -> PathBuf {
    std::env::temp_dir().join("cp-tests")
}

/// A connection to a test's records store, on whichever backend the run uses.
///
/// Query it with `sql_one!`, `sql_all!` and `sql_exec!`. Their SQL must hold on both backends:
/// `$1` parameters, no `::` casts, no `now()` or intervals (bind a `chrono` time), no array
/// literals (see [`Db::either`]). Uuids bind and decode as `Uuid` on both; read a JSON column
/// as `CAST(data AS TEXT)` into a `String`.
pub enum TestDb {
    Pg(PgConnection),
    Sqlite(SqliteConnection),
}

/// `sql_fetch!(fetch_one, db, (i64,), "SELECT ... WHERE id = $1", id)`: runs the query on `db`
/// (a `&mut TestDb`), binding every argument for the backend in use, and fetches rows of the
/// given type with the given method; panics when it fails.
macro_rules! sql_fetch {
    ($fetch:ident, $db:expr, $row:ty, $sql:expr $(, $arg:expr)* $(,)?) => {{
        let sql: &'static str = $sql;
        match $db {
            $crate::records::TestDb::Pg(conn) => {
                sqlx::query_as::<sqlx::Postgres, $row>(sql)
                    $(.bind($arg))*
                    .$fetch(conn)
                    .await
            }
            $crate::records::TestDb::Sqlite(conn) => {
                sqlx::query_as::<sqlx::Sqlite, $row>(sql)
                    $(.bind($arg))*
                    .$fetch(conn)
                    .await
            }
        }
        .expect(sql)
    }};
}
pub(crate) use sql_fetch;

/// `sql_one!(&mut conn, (i64,), "SELECT count(*) FROM t WHERE id = $1", id)`: the one row.
macro_rules! sql_one {
    ($($tokens:tt)*) => {
        $crate::records::sql_fetch!(fetch_one, $($tokens)*)
    };
}
pub(crate) use sql_one;

/// `sql_all!(&mut conn, (String,), "SELECT state FROM t")`: every row.
macro_rules! sql_all {
    ($($tokens:tt)*) => {
        $crate::records::sql_fetch!(fetch_all, $($tokens)*)
    };
}
pub(crate) use sql_all;

/// `sql_exec!(&mut conn, "UPDATE t SET a = $1 WHERE id = $2", a, id)`: runs a statement and
/// returns the number of rows it changed; panics when it fails.
macro_rules! sql_exec {
    ($db:expr, $sql:expr $(, $arg:expr)* $(,)?) => {{
        let sql: &'static str = $sql;
        match $db {
            $crate::records::TestDb::Pg(conn) => sqlx::query::<sqlx::Postgres>(sql)
                $(.bind($arg))*
                .execute(conn)
                .await
                .map(|done| done.rows_affected()),
            $crate::records::TestDb::Sqlite(conn) => sqlx::query::<sqlx::Sqlite>(sql)
                $(.bind($arg))*
                .execute(conn)
                .await
                .map(|done| done.rows_affected()),
        }
        .expect(sql)
    }};
}
pub(crate) use sql_exec;
