//! Spawns the real application on an ephemeral port against its own fresh records store: a
//! Postgres database, or with `TEST_RECORDS=sqlite` (or when Postgres does not answer) an SQLite
//! file in a directory of its own. A test that needs a service names it with [`needs!`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use control_plane::config::{LogFormat, ServerConfig};
use control_plane::domain::{CorrelationId, ExpiresInDays, Scope, Scopes, TokenName};
use control_plane::service::{BootstrapInput, IssueTokenInput, Services};
use control_plane::startup::Application;
use reqwest::{Method, RequestBuilder, Response};
use serde_json::Value;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, Executor, PgConnection, SqliteConnection};
use uuid::Uuid;

use crate::services;

/// The services one test of this run may need, named at its top with [`needs!`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Postgres records: a second server process on the same records, a proxy in front of
    /// Postgres, LISTEN/NOTIFY between processes.
    Postgres,
    /// The shared Redis fast state of the run.
    Redis,
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
        if !$crate::helpers::has(
            $crate::services::test_name!(),
            &[$($crate::helpers::Need::$need),+],
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
        if std::env::var("TEST_FAST_STATE").is_ok_and(|v| v == "memory") {
            return FastState::Memory;
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
fn sqlite_root() -> PathBuf {
    std::env::temp_dir().join("cp-tests")
}

/// The file of an `sqlite:` URL, read as the server reads it; `None` for a Postgres URL.
fn sqlite_path(url: &str) -> Option<&Path> {
    let path = url.strip_prefix("sqlite:")?;
    Some(Path::new(path.strip_prefix("//").unwrap_or(path)))
}

/// Base URL of the test Postgres server (no database part).
pub fn postgres_base() -> String {
    services::postgres_base()
}

/// Everything every test app logged, for the "no secret in logs" checks.
static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

#[derive(Clone)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut logs) = self.0.lock() {
            logs.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn init_logs() {
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let capture = Capture(buffer.clone());
        // Debug level, so a secret logged anywhere, even in a debug line, is caught.
        control_plane::telemetry::init(LogFormat::Json, "debug,hyper=info,h2=info", move || {
            capture.clone()
        });
        buffer
    });
}

pub fn captured_logs() -> String {
    LOGS.get()
        .map(|b| {
            String::from_utf8_lossy(&b.lock().map(|l| l.clone()).unwrap_or_default()).into_owned()
        })
        .unwrap_or_default()
}

/// Redis of the test suite on a Postgres run, unless `TEST_FAST_STATE=memory` or Redis does not
/// answer (then the in-process adapter). The SQLite run always uses the in-process adapter.
pub fn test_redis_url() -> Option<String> {
    if sqlite_mode() {
        return None;
    }
    (fast_state() == FastState::Redis).then(services::redis_url)
}

/// A configuration for one test: its own database, and its own Redis key prefix. On SQLite
/// records the fast state is always in process.
pub fn test_config(database_url: &str) -> ServerConfig {
    let mut config = ServerConfig::for_database(database_url);
    config.redis_url = if sqlite_path(database_url).is_some() {
        None
    } else {
        test_redis_url()
    };
    config.redis_prefix = format!("cpt:{}:", Uuid::new_v4().simple());
    // Test runners listen on loopback over plain http: named explicitly, as production would
    // have to (the default, without --dev, is https only).
    config.delivery_http_hosts = Some(control_plane::domain::EgressPolicy::LOOPBACK.into());
    // Generous, so the limiter runs on every request without tripping unrelated tests.
    config.rate_limit = control_plane::config::RateOption(Some(
        control_plane::storage::Rate::parse("100000/m").unwrap(),
    ));
    config.issue_rate_limit = config.rate_limit;
    config.ops_rate_limit = config.rate_limit;
    config.user_rate_limit = config.rate_limit;
    config.org_rate_limit = config.rate_limit;
    config.runner_address_rate_limit = config.rate_limit;
    config.runner_rate_limit = config.rate_limit;
    config
}

pub struct TestApp {
    pub address: String,
    /// The operator listener, when the test set `ops_listen`.
    pub ops_address: Option<String>,
    pub client: reqwest::Client,
    pub services: Arc<Services>,
    /// The Postgres database to drop, or on SQLite the directory to delete, after the test.
    pub database_name: String,
    pub database_url: String,
    pub config: ServerConfig,
    server: tokio::task::JoinHandle<()>,
}

/// A bootstrapped organisation: one workspace, one admin user, a token with every scope.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub organisation_id: Uuid,
    pub workspace_id: Uuid,
    pub user_id: Uuid,
    pub token: String,
}

/// A fresh, empty records store for one test: (what to remove afterwards, its URL). On Postgres
/// a new database; on SQLite a new directory under `<temp>/cp-tests/` where the server creates
/// `cp.db`.
pub async fn create_database() -> (String, String) {
    if sqlite_mode() {
        let dir = sqlite_root().join(Uuid::new_v4().to_string());
        std::fs::create_dir_all(&dir).expect("create the test database directory");
        let url = format!("sqlite://{}", dir.join("cp.db").display());
        return (dir.display().to_string(), url);
    }
    let name = format!("cp_test_{}", Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&format!("{}/postgres", postgres_base()))
        .await
        .expect("connect to Postgres");
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await
        .expect("create test database");
    let url = format!("{}/{name}", postgres_base());
    (name, url)
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(configure: impl FnOnce(&mut ServerConfig)) -> TestApp {
    init_logs();
    let (database_name, database_url) = create_database().await;
    let mut config = test_config(&database_url);
    configure(&mut config);
    spawn_with_config(database_name, config).await
}

pub async fn spawn_with_config(database_name: String, config: ServerConfig) -> TestApp {
    init_logs();
    let database_url = config.database_url.clone().unwrap_or_default();
    let app = Application::build(&config)
        .await
        .expect("build the application");
    let address = format!("http://127.0.0.1:{}", app.port());
    let ops_address = app.ops_port().map(|p| format!("http://127.0.0.1:{p}"));
    let services = app.services();
    let server = tokio::spawn(async move {
        let _ = app.run().await;
    });
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    TestApp {
        address,
        ops_address,
        client,
        services,
        database_name,
        database_url,
        config,
        server,
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.server.abort();
        // The Postgres database to drop; an SQLite directory goes at once.
        let postgres = if sqlite_path(&self.database_url).is_some() {
            // Only ever a directory `create_database` made: never anything else by mistake.
            let root = sqlite_root();
            let dir = Path::new(&self.database_name);
            if dir.starts_with(&root) && dir != root {
                let _ = std::fs::remove_dir_all(dir);
            }
            None
        } else {
            Some(self.database_name.clone())
        };
        let redis = self.config.redis_url.clone();
        let prefix = self.config.redis_prefix.clone();
        if postgres.is_none() && redis.is_none() {
            return;
        }
        // Async drop does not exist: clean up on a thread with its own runtime.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Some(url) = redis {
                    delete_redis_keys(&url, &prefix).await;
                }
                if let Some(name) = postgres
                    && let Ok(mut admin) =
                        PgConnection::connect(&format!("{}/postgres", postgres_base())).await
                {
                    let _ = admin
                        .execute(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        )))
                        .await;
                }
            });
        })
        .join();
    }
}

/// Every key under `prefix`, with its raw value.
pub async fn redis_values(url: &str, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let Ok(client) = redis::Client::open(url) else {
        return vec![];
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
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
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
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

/// A real `control-plane` process, killed on drop.
pub struct ServerProcess {
    pub address: String,
    child: std::process::Child,
}

impl ServerProcess {
    /// Starts the binary with `config` on an ephemeral port and waits until it listens.
    pub fn start(config: &ServerConfig, hash_key: &str, record_key: &str) -> Self {
        Self::start_with_env(config, hash_key, record_key, &[])
    }

    /// [`start`](Self::start), with more environment (a fault hook, a setting).
    pub fn start_with_env(
        config: &ServerConfig,
        hash_key: &str,
        record_key: &str,
        env: &[(&str, &str)],
    ) -> Self {
        use std::io::BufRead;
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_control-plane"));
        match &config.delivery_http_hosts {
            Some(hosts) => command.env("CP_DELIVERY_HTTP_HOSTS", hosts),
            None => command.env_remove("CP_DELIVERY_HTTP_HOSTS"),
        };
        command.envs(env.iter().copied());
        command
            .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
            .env(
                "DATABASE_URL",
                config.database_url.clone().unwrap_or_default(),
            )
            .env("CP_TOKEN_HASH_KEY", hash_key)
            .env("CP_IDEMPOTENCY_KEYS", record_key)
            .env("CP_REDIS_PREFIX", &config.redis_prefix)
            .env(
                "CP_COMMAND_TIMEOUT_SWEEP_SECS",
                config.command_timeout_sweep_secs.to_string(),
            )
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        for (name, rate) in [
            ("CP_RATE_LIMIT", config.rate_limit.0),
            ("CP_ISSUE_RATE_LIMIT", config.issue_rate_limit.0),
        ] {
            let value = rate
                .map(|r| format!("{}/{}s", r.burst, r.period.as_secs()))
                .unwrap_or_else(|| "off".into());
            command.env(name, value);
        }
        match &config.redis_url {
            Some(url) => command.env("REDIS_URL", url),
            None => command.env_remove("REDIS_URL"),
        };
        let mut child = command.spawn().expect("start control-plane");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = std::io::BufReader::new(stdout).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("server exited before listening")
                .expect("read log");
            let Ok(entry) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if entry["fields"]["message"] == "listening" {
                break entry["fields"]["port"].as_u64().expect("port");
            }
        };
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self {
            address: format!("http://127.0.0.1:{port}"),
            child,
        }
    }
}

impl ServerProcess {
    /// Waits until the process has exited by itself (a fault hook), killing it after `limit`.
    pub fn wait_for_exit(mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TestApp {
    /// Stops the server and waits until it is gone, with its embedded store lock: a new server
    /// may then start on the same records, as after a restart.
    pub async fn stop(&mut self) {
        self.server.abort();
        let _ = (&mut self.server).await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> String {
        let response = self.client.get(self.url("/metrics")).send().await.unwrap();
        response.text().await.unwrap()
    }

    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.client.request(method, self.url(path))
    }

    pub fn get(&self, path: &str, token: &str) -> RequestBuilder {
        self.request(Method::GET, path).bearer_auth(token)
    }

    pub fn post_json(&self, path: &str, token: &str, body: &Value) -> RequestBuilder {
        self.request(Method::POST, path)
            .bearer_auth(token)
            .json(body)
    }

    pub fn delete_json(&self, path: &str, token: &str, body: &Value) -> RequestBuilder {
        self.request(Method::DELETE, path)
            .bearer_auth(token)
            .json(body)
    }

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

    /// Bootstraps a tenant through the service layer, as `cpctl bootstrap` does, with a 90-day
    /// token.
    pub async fn bootstrap(&self) -> Tenant {
        let suffix = Uuid::new_v4().simple().to_string();
        let done = self
            .services
            .bootstrap(
                BootstrapInput {
                    organisation: format!("org-{suffix}"),
                    workspace: "main".into(),
                    admin_email: format!("admin-{suffix}@example.com"),
                    // The longest lifetime, so the 30-day tokens it issues are not capped.
                    expires_in_days: ExpiresInDays::parse(90).expect("days"),
                },
                &CorrelationId::generate(),
            )
            .await
            .expect("bootstrap");
        Tenant {
            organisation_id: done.organisation.id,
            workspace_id: done.workspace.id,
            user_id: done.user.id,
            token: done.credential.secret.expose().to_owned(),
        }
    }

    pub async fn create_workspace(&self, organisation_id: Uuid, name: &str) -> Uuid {
        self.services
            .create_workspace(organisation_id, name, &CorrelationId::generate())
            .await
            .expect("workspace")
            .id
    }

    pub async fn create_environment(&self, workspace_id: Uuid, name: &str) -> Uuid {
        self.services
            .create_environment(workspace_id, name, &CorrelationId::generate())
            .await
            .expect("environment")
            .id
    }

    /// Issues a token for `user` through the admin path: any scopes, workspaces, environments.
    pub async fn admin_token(
        &self,
        tenant: &Tenant,
        scopes: &[Scope],
        workspaces: &[Uuid],
        environments: &[Uuid],
    ) -> String {
        let input = IssueTokenInput::new(
            TokenName::parse(&format!("t-{}", Uuid::new_v4().simple())).expect("name"),
            scopes.iter().copied().collect::<Scopes>(),
            tenant.organisation_id,
            workspaces.to_vec(),
            environments.to_vec(),
            ExpiresInDays::default(),
        )
        .expect("input");
        self.services
            .issue_token_for_user(tenant.user_id, input, &CorrelationId::generate())
            .await
            .expect("issue")
            .secret
            .expose()
            .to_owned()
    }

    /// Issues a token over HTTP with `body`, returning the response.
    pub async fn issue(&self, token: &str, body: &Value) -> Response {
        self.post_json("/v1/personal-access-tokens", token, body)
            .send()
            .await
            .expect("request")
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
            $crate::helpers::TestDb::Pg(conn) => {
                sqlx::query_as::<sqlx::Postgres, $row>($sql)
                    $(.bind($arg))*
                    .$fetch(conn)
                    .await
            }
            $crate::helpers::TestDb::Sqlite(conn) => {
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
        $crate::helpers::sql_fetch!(fetch_one, $($tokens)*)
    };
}
pub(crate) use sql_one;

/// `sql_all!(&mut db, (String,), "SELECT state FROM t")`: every row.
macro_rules! sql_all {
    ($($tokens:tt)*) => {
        $crate::helpers::sql_fetch!(fetch_all, $($tokens)*)
    };
}
pub(crate) use sql_all;

/// `sql_exec!(&mut db, "UPDATE t SET a = $1 WHERE id = $2", a, id)`: runs a statement and
/// returns `Result<u64, sqlx::Error>`, the number of rows it affected.
macro_rules! sql_exec {
    ($db:expr, $sql:expr $(, $arg:expr)* $(,)?) => {
        match $db {
            $crate::helpers::TestDb::Pg(conn) => sqlx::query::<sqlx::Postgres>($sql)
                $(.bind($arg))*
                .execute(conn)
                .await
                .map(|done| done.rows_affected()),
            $crate::helpers::TestDb::Sqlite(conn) => sqlx::query::<sqlx::Sqlite>($sql)
                $(.bind($arg))*
                .execute(conn)
                .await
                .map(|done| done.rows_affected()),
        }
    };
}
pub(crate) use sql_exec;

/// A runner pool made through the service layer, as `cpctl pools create` does.
pub async fn create_pool(app: &TestApp, workspace: Uuid, name: &str) -> Uuid {
    app.services
        .create_pool(workspace, name, &CorrelationId::generate())
        .await
        .expect("pool")
        .id
}

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

/// A valid issuance body for `tenant`, to be varied by each test.
pub fn issuance_body(tenant: &Tenant) -> Value {
    serde_json::json!({
        "name": format!("token-{}", Uuid::new_v4().simple()),
        "scopes": ["activity:read"],
        "organisationId": tenant.organisation_id,
        "workspaceIds": [tenant.workspace_id],
    })
}

/// Asserts an ApiError: status, code, and `correlationId` equal to the response header.
pub async fn assert_api_error(response: Response, status: u16, code: &str) -> Value {
    assert_eq!(response.status().as_u16(), status, "status");
    let header = response
        .headers()
        .get("x-correlation-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .expect("x-correlation-id header on an error");
    let body: Value = response.json().await.expect("ApiError body is JSON");
    assert_eq!(
        body["correlationId"],
        Value::String(header),
        "correlationId equals the header: {body}"
    );
    assert_eq!(body["error"]["code"], code, "error code in {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "message in {body}"
    );
    body
}

/// A TCP proxy that a test can cut and restore, to simulate a dependency going down, or
/// stall, to simulate a network that silently drops packets.
pub struct Proxy {
    pub port: u16,
    target: String,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// While true, bytes are held instead of forwarded; connections stay open.
    stalled: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Proxy {
    pub async fn start(target: &str) -> Arc<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let proxy = Arc::new(Self {
            port,
            target: target.to_owned(),
            task: Mutex::new(None),
            stalled: Arc::new(tokio::sync::watch::channel(false).0),
        });
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let target = self.target.clone();
        let stalled = self.stalled.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                let target = target.clone();
                let stalled = stalled.clone();
                connections.spawn(async move {
                    if let Ok(outbound) = tokio::net::TcpStream::connect(target).await {
                        let (in_read, in_write) = inbound.into_split();
                        let (out_read, out_write) = outbound.into_split();
                        tokio::join!(
                            pump(in_read, out_write, stalled.subscribe()),
                            pump(out_read, in_write, stalled.subscribe()),
                        );
                    }
                });
            }
        });
        if let Ok(mut slot) = self.task.lock() {
            *slot = Some(task);
        }
    }

    /// Holds every byte from now on, in both directions, without closing anything.
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Forwards again, held bytes first.
    pub fn unstall(&self) {
        self.stalled.send_replace(false);
    }

    /// Stops accepting and drops every open connection (the JoinSet aborts them on drop).
    pub fn cut(&self) {
        if let Ok(mut slot) = self.task.lock()
            && let Some(task) = slot.take()
        {
            task.abort();
        }
    }

    pub async fn restore(&self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("rebind proxy");
        self.serve(listener);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if stalled.wait_for(|s| !*s).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// What a client can tell an error apart by: status, code, message and details (the
/// correlation id differs on every response). Two answers with equal shapes are
/// indistinguishable.
pub async fn error_shape(response: Response) -> Value {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("ApiError body is JSON");
    serde_json::json!({
        "status": status,
        "code": body["error"]["code"],
        "message": body["error"]["message"],
        "details": body["error"]["details"],
    })
}

/// Installs the deny-all test policy and makes it the active authorizer, as `cpctl policies
/// install` then `activate` would; every replica on these records picks it up.
pub async fn activate_deny_all(services: &Services) {
    let policy = services
        .install_policy(
            "deny-all",
            control_plane::policy::PolicyKind::Authorizer,
            control_plane::policy::fixtures::DENY_ALL,
        )
        .await
        .unwrap();
    services
        .activate_policy(&format!("deny-all@{}", policy.version))
        .await
        .unwrap();
}
