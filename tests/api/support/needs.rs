//! Which services this run has and which records store and fast state the suite uses: Postgres
//! or SQLite records, Redis, a Redis Cluster (`TEST_FAST_STATE=cluster`, started by the suite)
//! or in-process fast state, each chosen once per run from the environment and what answers. A test that needs a service names it with [`needs!`] and
//! skips, with one line, on a run without it (or fails under `CP_TEST_REQUIRE_SERVICES=1`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{redis_cluster, services};

/// The services one test of this run may need, named at its top with [`needs!`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Postgres records: a second server process on the same records, a proxy in front of
    /// Postgres, LISTEN/NOTIFY between processes.
    Postgres,
    /// The shared Redis fast state of the run: a single Redis or the cluster.
    Redis,
    /// A Postgres primary and streaming replica of the test's own (`pg_replica`), on a Postgres
    /// run: the server binaries (`pg_config --bindir`).
    PostgresReplica,
    /// The single Redis of the Postgres + Redis run, not the cluster run.
    SingleRedis,
    /// The `TEST_FAST_STATE=cluster` run (`redis-server` and `redis-cli` on the PATH).
    RedisCluster,
    /// A `redis-server` binary on the PATH, for a test that starts and stops a Redis of its own.
    RedisServer,
    /// A Python with the official Standard Webhooks and Svix libraries, named by
    /// `CP_TEST_WEBHOOK_PYTHON` (`tests/webhooks/python.sh` prints one).
    WebhookLibraries,
}

/// `needs!(Postgres, Redis);` at the top of a test: returns from it, with one line on the
/// terminal saying what it needs, when this run lacks any of them (a run configured without it,
/// or a service that does not answer; the latter fails instead under
/// `CP_TEST_REQUIRE_SERVICES=1`).
macro_rules! needs {
    ($($need:ident),+ $(,)?) => {
        if !$crate::support::has(
            $crate::services::test_name!(),
            &[$($crate::support::Need::$need),+],
        ) {
            return;
        }
    };
}
pub(crate) use needs;

/// Whether this run has every one of `needs`; if not, says which is missing and why, once.
pub fn has(test: &str, needs: &[Need]) -> bool {
    for need in needs {
        if let Some(why) = lacks(*need) {
            services::skip(test, &why);
            return false;
        }
    }
    true
}

/// Why this run lacks `need`, or `None` when it has it.
fn lacks(need: Need) -> Option<String> {
    match need {
        Need::Postgres => match records() {
            Records::Postgres => None,
            Records::Sqlite => Some("Postgres records; this is the TEST_RECORDS=sqlite run".into()),
            Records::SqliteFallback => Some(format!(
                "Postgres at {} (not answering; start it, or point TEST_POSTGRES_URL at one)",
                services::address(&postgres_base())
            )),
        },
        Need::Redis => {
            if test_redis_url().is_some() {
                return None;
            }
            // Ask about Redis only on a Postgres run: the SQLite runs never use it.
            Some(match records() {
                Records::Sqlite => "Redis; this is the TEST_RECORDS=sqlite run".into(),
                Records::SqliteFallback => format!(
                    "Redis, used only on Postgres records (Postgres at {} not answering; start it)",
                    services::address(&postgres_base())
                ),
                Records::Postgres if fast_state() == FastState::Memory => {
                    "Redis; this is the TEST_FAST_STATE=memory run".into()
                }
                Records::Postgres => format!(
                    "Redis at {} (not answering; start it, or point TEST_REDIS_URL at one)",
                    services::address(&services::redis_url())
                ),
            })
        }
        Need::PostgresReplica => lacks(Need::Postgres).or_else(|| {
            let what = crate::pg_replica::PgPair::available().err()?;
            services::missing(&what);
            Some(what)
        }),
        Need::SingleRedis => match fast_state() {
            FastState::Cluster => {
                Some("a single Redis; this is the TEST_FAST_STATE=cluster run".into())
            }
            _ => lacks(Need::Redis),
        },
        Need::RedisCluster => match fast_state() {
            FastState::Cluster if !sqlite_mode() => None,
            _ => Some("a Redis Cluster; this is not the TEST_FAST_STATE=cluster run".into()),
        },
        Need::RedisServer => {
            if services::on_path("redis-server") {
                return None;
            }
            let why = "redis-server on the PATH (it starts and stops a Redis of its own)";
            services::missing(why);
            Some(why.into())
        }
        Need::WebhookLibraries => {
            if std::env::var_os(WEBHOOK_PYTHON_VAR).is_some() {
                return None;
            }
            let why = "CP_TEST_WEBHOOK_PYTHON, a Python with the receiver libraries \
                       (export CP_TEST_WEBHOOK_PYTHON=$(tests/webhooks/python.sh))";
            services::missing(why);
            Some(why.into())
        }
    }
}

/// Names the Python of [`Need::WebhookLibraries`].
pub const WEBHOOK_PYTHON_VAR: &str = "CP_TEST_WEBHOOK_PYTHON";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Records {
    Postgres,
    /// `TEST_RECORDS=sqlite`: the run asked for SQLite.
    Sqlite,
    /// No `TEST_RECORDS` and Postgres does not answer: the run fell back to SQLite.
    SqliteFallback,
}

/// The records store of this run: SQLite with `TEST_RECORDS=sqlite`; otherwise Postgres, or,
/// when Postgres does not answer and services are not required, SQLite (said once), so the
/// README's command runs the suite on a machine with no services.
fn records() -> Records {
    static RECORDS: OnceLock<Records> = OnceLock::new();
    *RECORDS.get_or_init(|| {
        if std::env::var("TEST_RECORDS").is_ok_and(|v| v == "sqlite") {
            return Records::Sqlite;
        }
        let base = postgres_base();
        if services::answers(&base) {
            return Records::Postgres;
        }
        let what = format!("Postgres at {} does not answer", services::address(&base));
        services::missing(&what);
        services::say(&format!(
            "{what}: the HTTP suite runs on SQLite records instead, and the tests that need \
             Postgres skip (set {}=1 to fail instead)",
            services::REQUIRE_VAR
        ));
        Records::SqliteFallback
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FastState {
    Redis,
    /// `TEST_FAST_STATE=cluster`: the three-master cluster the suite starts (`redis_cluster`).
    Cluster,
    /// `TEST_FAST_STATE=memory`: the run asked for the in-process adapter.
    Memory,
    /// Redis does not answer: the run fell back to the in-process adapter.
    MemoryFallback,
}

/// The fast state of a Postgres run: Redis, unless `TEST_FAST_STATE=memory` or Redis does not
/// answer (said once; a failure under `CP_TEST_REQUIRE_SERVICES=1`).
fn fast_state() -> FastState {
    static FAST: OnceLock<FastState> = OnceLock::new();
    *FAST.get_or_init(|| {
        match std::env::var("TEST_FAST_STATE").as_deref() {
            Ok("memory") => return FastState::Memory,
            Ok("cluster") => match redis_cluster::shared() {
                Ok(url) => {
                    services::say(&format!(
                        "the HTTP suite's fast state: a Redis Cluster ({url})"
                    ));
                    return FastState::Cluster;
                }
                Err(why) => {
                    let what = format!("a Redis Cluster could not be started: {why}");
                    services::missing(&what);
                    services::say(&format!(
                        "{what}: the fast state is kept in process instead"
                    ));
                    return FastState::MemoryFallback;
                }
            },
            _ => {}
        }
        let url = services::redis_url();
        if services::answers(&url) {
            return FastState::Redis;
        }
        let what = format!("Redis at {} does not answer", services::address(&url));
        services::missing(&what);
        services::say(&format!(
            "{what}: the HTTP suite keeps its fast state in process instead, and the tests that \
             need Redis skip (set {}=1 to fail instead)",
            services::REQUIRE_VAR
        ));
        FastState::MemoryFallback
    })
}

/// True when the suite runs on SQLite records (`TEST_RECORDS=sqlite`, or Postgres not
/// answering); otherwise Postgres.
pub fn sqlite_mode() -> bool {
    records() != Records::Postgres
}

/// The directory under which each SQLite test keeps its database, one directory per test.
pub(crate) fn sqlite_root() -> PathBuf {
    std::env::temp_dir().join("cp-tests")
}

/// The file of an `sqlite:` URL, read as the server reads it; `None` for a Postgres URL.
pub(crate) fn sqlite_path(url: &str) -> Option<&Path> {
    let path = url.strip_prefix("sqlite:")?;
    Some(Path::new(path.strip_prefix("//").unwrap_or(path)))
}

/// Base URL of the test Postgres server (no database part).
pub fn postgres_base() -> String {
    services::postgres_base()
}

/// `REDIS_URL` of the test suite on a Postgres run: the single Redis, or the cluster's seeds
/// with `TEST_FAST_STATE=cluster`; `None` with `TEST_FAST_STATE=memory` or when Redis does not
/// answer (then the in-process adapter). The SQLite run always uses the in-process adapter.
pub fn test_redis_url() -> Option<String> {
    if sqlite_mode() {
        return None;
    }
    match fast_state() {
        FastState::Redis => Some(services::redis_url()),
        FastState::Cluster => redis_cluster::shared().ok(),
        FastState::Memory | FastState::MemoryFallback => None,
    }
}
