//! Starts the real application for one test: in process on an ephemeral port against its own
//! fresh records store and Redis key prefix (removed when the [`TestApp`] drops), or as a
//! separate `control-plane` process on the same records ([`ServerProcess`]). Every in-process
//! app logs into one buffer, for the "no secret in logs" checks.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use control_plane::config::{LogFormat, ServerConfig};
use control_plane::service::Services;
use control_plane::startup::Application;
use serde_json::Value;
use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

use super::db::delete_redis_keys;
use super::needs::{postgres_base, sqlite_mode, sqlite_path, sqlite_root, test_redis_url};

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

/// A rate limit option from its text (`"2/m"`), for a test that sets one budget low.
pub fn rate(raw: &str) -> control_plane::config::RateOption {
    control_plane::config::RateOption(Some(control_plane::storage::Rate::parse(raw).unwrap()))
}

/// A configuration for one test: its own database, and its own Redis key prefix. On SQLite
/// records the fast state is always in process. Built from the flags' defaults and what this
/// function and the test set, never from `CP_*`, `DATABASE_URL` or `REDIS_URL` in the shell
/// running the suite (only its own `TEST_*` selectors).
pub fn test_config(database_url: &str) -> ServerConfig {
    let mut config = ServerConfig::defaults_for_database(database_url);
    config.redis_url = if sqlite_path(database_url).is_some() {
        None
    } else {
        test_redis_url()
    };
    config.redis_prefix = format!("cpt:{}:", Uuid::new_v4().simple());
    // One native-code cache for the whole run: an 18 MB Python or JavaScript policy is compiled
    // once, not by every test that installs it.
    config.policy_cache_dir =
        Some(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("policy-cache"));
    // Test runners listen on loopback over plain http: named explicitly, as production would
    // have to (the default, without --dev, is https only).
    config.delivery_http_hosts = Some(control_plane::domain::EgressPolicy::LOOPBACK.into());
    // Generous, so the limiter runs on every request without tripping unrelated tests.
    config.rate_limit = control_plane::config::RateOption(Some(
        control_plane::storage::Rate::parse("100000/m").unwrap(),
    ));
    config.issue_rate_limit = config.rate_limit;
    // Patient, so a decision of the built-in authorizer is never failed closed because the whole
    // suite shares two cores (a 50 ms stall did it once in CI). Tests about the deadline set
    // their own; a policy's speed is a benchmark's business.
    config.policy_deadline_ms = 1000;
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
        without_shell_settings(&mut command);
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
            .env(
                "CP_POLICY_DEADLINE_MS",
                config.policy_deadline_ms.to_string(),
            )
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

/// Removes from a server child's environment every setting the shell running the suite holds
/// (`CP_*` but the suite's own `CP_TEST_*`, `DATABASE_URL`, `REDIS_URL`): its settings come
/// from the test alone.
pub fn without_shell_settings(command: &mut std::process::Command) -> &mut std::process::Command {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if server_setting(&name) {
            command.env_remove(&*name);
        }
    }
    command
}

/// Whether the environment variable `name` is one the server reads as a setting.
fn server_setting(name: &str) -> bool {
    (name.starts_with("CP_") && !name.starts_with("CP_TEST_"))
        || matches!(name, "DATABASE_URL" | "REDIS_URL")
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

    /// Waits until a pass of the background `task` (`deliveries`, `command_timeouts`,
    /// `token_expiry_notices`) that began at or after `at` has completed: whatever that task
    /// would do about the state at `at` is done. The witness a test waits for before it
    /// asserts that the task did nothing.
    pub async fn background_pass_after(&self, task: &str, at: chrono::DateTime<chrono::Utc>) {
        let address = self.ops_address.as_deref().unwrap_or(&self.address);
        background_pass_after(address, task, at).await;
    }
}

/// [`TestApp::background_pass_after`] for the server at `address` (a [`ServerProcess`]).
pub async fn background_pass_after(address: &str, task: &str, at: chrono::DateTime<chrono::Utc>) {
    let wanted = at.timestamp_micros() as f64 / 1e6;
    let series = format!("background_pass_started_seconds{{task=\"{task}\"}} ");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = None;
    loop {
        let text = reqwest::get(format!("{address}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        last = text
            .lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .or(last);
        if last.is_some_and(|started| started >= wanted) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {task} pass began after {at} (the last began at {last:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `test_config` ignores the environment: this test binary, run again as a child with the
/// server's settings in its environment, builds the same configuration as without them.
#[cfg(test)]
mod environment {
    use super::test_config;
    use control_plane::config::ServerConfig;

    /// Set in the child only: it then prints what it built instead of testing.
    const PROBE: &str = "CP_TEST_CONFIG_PROBE";
    const URL: &str = "sqlite:///nonexistent/cp-config-probe/cp.db";

    /// What a configuration is, less its per-test Redis prefix.
    fn shape(config: &ServerConfig) -> String {
        let mut config = config.clone();
        config.redis_prefix.clear();
        format!("{config:?}")
    }

    /// In the child: the test configuration, and `for_database`'s reading of the same
    /// environment, to show the settings did reach the process.
    #[test]
    fn probe_prints_the_test_config() {
        if std::env::var_os(PROBE).is_none() {
            return;
        }
        println!("probe-test-config: {}", shape(&test_config(URL)));
        let read = ServerConfig::for_database(URL);
        println!(
            "probe-read: {} {}",
            read.body_limit, read.policy_deadline_ms
        );
    }

    #[test]
    fn a_test_config_takes_nothing_from_the_environment() {
        let settings = [
            ("CP_BODY_LIMIT", "4242"),
            ("CP_POLICY_DEADLINE_MS", "7"),
            ("CP_DEV", "true"),
            ("CP_DATA_DIR", "/nonexistent/developer"),
            ("CP_SSE_HEARTBEAT_MS", "1234"),
            ("CP_DELIVERY_POLL_MS", "25"),
            ("CP_DELIVERY_RETRY_SCHEDULE", "0s,1s"),
            ("CP_COMMAND_TIMEOUT_SWEEP_SECS", "99"),
            ("CP_AUDIT_STREAM_MAX_AGE_SECS", "3"),
            ("CP_RATE_LIMIT", "1/m"),
            ("CP_AUTHORIZER", "allow-all"),
            ("CP_LOG_FORMAT", "json"),
            ("DATABASE_URL", "postgres://developer@elsewhere/db"),
            ("REDIS_URL", "redis://elsewhere:6379"),
        ];
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child
            .args([
                "--exact",
                "support::server::environment::probe_prints_the_test_config",
            ])
            .args(["--nocapture", "--test-threads", "1"])
            .env(PROBE, "1");
        // Whatever this shell set, the child has exactly these settings.
        super::without_shell_settings(&mut child).envs(settings);
        let output = child.output().expect("run the probe");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stdout}{stderr}");
        let line = |prefix: &str| {
            stdout
                .lines()
                .find_map(|l| l.split_once(prefix).map(|(_, rest)| rest))
                .unwrap_or_else(|| panic!("no {prefix:?} line in: {stdout}"))
                .to_owned()
        };
        // The settings reached the child: read from its environment, they change the defaults.
        assert_eq!(line("probe-read: "), "4242 7");
        // The test configuration is the one built here, whatever either environment holds.
        assert_eq!(line("probe-test-config: "), shape(&test_config(URL)));
    }
}
