//! What the copy tests stand on: Postgres databases and temporary directories removed after
//! the test, `cpctl` run against a store or over HTTP, a real server started on a store and the
//! client that reads it back, and the listings compared between an original and its copy.

use super::*;

/// The tables a copy fills (all but `policy_state`, which the migrations seed).
pub(crate) const RECORD_TABLES: &[&str] = &[
    "settings",
    "organisations",
    "workspaces",
    "environments",
    "users",
    "tokens",
    "token_workspaces",
    "audit_events",
    "policies",
    "policy_activations",
    "policy_shadows",
    "shadow_disagreements",
    "runner_pools",
    "runners",
    "runner_keys",
    "runner_commands",
    "webhook_deliveries",
    "workflows",
    "workflow_revisions",
    "plugins",
    "plugin_reviews",
    "review_reports",
];

/// A Postgres database name, dropped at the end; `created` false leaves creating it to the copy.
pub(crate) struct PgDb {
    pub(crate) name: String,
    pub(crate) url: String,
}

impl PgDb {
    pub(crate) async fn new(created: bool) -> Self {
        let name = format!("cp_copy_{}", Uuid::new_v4().simple());
        if created {
            admin()
                .await
                .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .await
                .unwrap();
        }
        Self {
            url: format!("{}/{name}", services::postgres_base()),
            name,
        }
    }

    /// Rows in each record table.
    pub(crate) async fn counts(&self) -> Vec<(&'static str, i64)> {
        let mut conn = PgConnection::connect(&self.url).await.unwrap();
        let mut counts = Vec::new();
        for table in RECORD_TABLES {
            let (n,): (i64,) =
                sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
            counts.push((*table, n));
        }
        counts
    }

    pub(crate) async fn drop_db(self) {
        let _ = admin()
            .await
            .execute(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            )))
            .await;
    }
}

pub(crate) async fn admin() -> PgConnection {
    PgConnection::connect(&format!("{}/postgres", services::postgres_base()))
        .await
        .unwrap()
}

/// A directory of its own for SQLite files, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("cp-copy-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub(crate) fn url(&self, file: &str) -> String {
        format!("sqlite://{}", self.0.join(file).display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One key-encryption key file for every process of this test binary, as an operator names
/// one (`CP_KEY_ENCRYPTION_KEY_FILE`) for both ends of a copy: the generated keys are copied
/// wrapped with it.
pub(crate) fn key_file() -> &'static std::path::Path {
    static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("cp-copy-kek-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("control-plane.kek")
    })
}

pub(crate) fn cpctl(database_url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args(args)
        .env("DATABASE_URL", database_url)
        .env("CP_KEY_ENCRYPTION_KEY_FILE", key_file())
        .env_remove("CP_KEY_ENCRYPTION_KEY")
        .env_remove("CP_TOKEN_HASH_KEY")
        .env_remove("CP_STORE_COPY_CRASH_AFTER_TABLES")
        .output()
        .unwrap()
}

pub(crate) fn ok(o: Output) -> Output {
    assert!(
        o.status.success(),
        "cpctl failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `cpctl … -o json` that must succeed, parsed.
pub(crate) fn json_of(database_url: &str, args: &[&str]) -> Value {
    let o = ok(cpctl(database_url, &[args, &["-o", "json"]].concat()));
    serde_json::from_slice(&o.stdout).unwrap()
}

pub(crate) fn id(v: &Value) -> String {
    v["id"].as_str().expect("an id").to_owned()
}

pub(crate) fn store_copy(from: &str, to: &str) -> Output {
    cpctl(
        "",
        &["store", "copy", "--from", from, "--to", to, "-o", "json"],
    )
}

/// The real application on an ephemeral port, on a runtime of its own: stopping it ends every
/// task it started (open streams, background loops), as stopping the process would.
pub(crate) struct Server {
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub(crate) async fn start(database_url: &str) -> Self {
        let mut config = ServerConfig::for_database(database_url);
        config.key_encryption_key_file = Some(key_file().to_owned());
        config.delivery_http_hosts = Some(control_plane::domain::EgressPolicy::LOOPBACK.into());
        // Generous, so no budget trips during the test.
        let rate = control_plane::config::RateOption(Some(
            control_plane::storage::Rate::parse("100000/m").unwrap(),
        ));
        config.rate_limit = rate;
        config.issue_rate_limit = rate;
        config.user_rate_limit = rate;
        config.org_rate_limit = rate;
        config.runner_address_rate_limit = rate;
        config.runner_rate_limit = rate;
        let (port_tx, port_rx) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let app = Application::build(&config).await.expect("build the server");
                let _ = port_tx.send(app.port());
                tokio::select! {
                    _ = app.run() => {}
                    _ = stopped => {}
                }
            });
            runtime.shutdown_background();
        });
        let port = port_rx.await.expect("the server started");
        Self {
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Stops it and waits until it is gone, with its hold on the embedded store.
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        let thread = self.thread.take().unwrap();
        tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap();
    }

    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub(crate) async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, token, None).await
    }

    pub(crate) async fn post(&self, path: &str, token: &str, body: &Value) -> Value {
        let (status, body) = self
            .call(reqwest::Method::POST, path, token, Some(body))
            .await;
        assert_eq!(status, 200, "POST {path}: {body}");
        body
    }

    /// The first `count` events of an audit stream, as (id, event, data parsed).
    pub(crate) async fn stream(
        &self,
        path: &str,
        token: &str,
        last_event_id: Option<i64>,
        count: usize,
    ) -> Vec<(i64, String, Value)> {
        let mut request = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(last) = last_event_id {
            request = request.header("last-event-id", last.to_string());
        }
        let mut response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let mut text = String::new();
        let mut events = Vec::new();
        // Bounded so a stream that never sends enough fails instead of hanging the run.
        let read = async {
            while events.len() < count {
                let Some(chunk) = response.chunk().await.unwrap() else {
                    break;
                };
                text.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = text.find("\n\n") {
                    let block: String = text.drain(..end + 2).collect();
                    let field = |name: &str| {
                        block
                            .lines()
                            .find_map(|l| l.strip_prefix(name))
                            .map(|v| v.trim_start().to_owned())
                    };
                    if let (Some(id), Some(event), Some(data)) =
                        (field("id:"), field("event:"), field("data:"))
                    {
                        events.push((
                            id.parse().unwrap(),
                            event,
                            serde_json::from_str(&data).unwrap(),
                        ));
                    }
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(60), read).await;
        events
    }
}

/// Everything the read endpoints answer for the workspace: the whole activity, the activity in
/// pages of 4 followed by cursor, the stream replayed from the start, resumed with
/// `Last-Event-ID`, and filtered by type.
pub(crate) async fn reads(server: &Server, token: &str, workspace: &str) -> Vec<Value> {
    let (status, all) = server
        .get(
            &format!("/v1/workspaces/{workspace}/activity?limit=100"),
            token,
        )
        .await;
    assert_eq!(status, 200, "{all}");
    let items = all["items"].as_array().unwrap().clone();
    let mut pages = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = server
            .get(
                &format!("/v1/workspaces/{workspace}/activity?limit=4&cursor={cursor}"),
                token,
            )
            .await;
        assert_eq!(status, 200, "{page}");
        pages.push(page.clone());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    let stream = format!("/v1/workspaces/{workspace}/audit/stream");
    let replay = server
        .stream(&format!("{stream}?after=0"), token, None, items.len())
        .await;
    let newest = items[0]["sequence"].as_i64().unwrap();
    let resumed = server.stream(&stream, token, Some(newest - 3), 3).await;
    let types = "token.issued,runner_command.submitted";
    let typed = items
        .iter()
        .filter(|i| types.split(',').any(|t| i["type"] == t))
        .count();
    let filtered = server
        .stream(
            &format!("{stream}?after=0&types={types}"),
            token,
            None,
            typed,
        )
        .await;
    assert_eq!(replay.len(), items.len());
    assert_eq!(resumed.len(), 3);
    assert_eq!(filtered.len(), typed);
    vec![
        all,
        Value::Array(pages),
        json!(replay),
        json!(resumed),
        json!(filtered),
    ]
}

/// What `cpctl` lists over HTTP from `server` as `token` (the credential `token_id`), per
/// command: the organisations, and the caller's organisation's workspaces, each one's
/// environments, users and tokens; the policies, and `workspace`'s pools and workflows and
/// `plugin`'s reviews. The lister's own last use is left out: listing records it. So is the
/// shadow report: with a shadow active, every request adds to it (the copy's row counts hold it).
pub(crate) fn http_listings(
    server: &Server,
    token: &str,
    token_id: &str,
    workspace: &str,
    plugin: &str,
) -> Vec<Value> {
    let list = |args: &[&str]| remote_json(server, token, args);
    let workspaces = list(&["workspaces", "list"]);
    let mut listed = vec![
        list(&["orgs", "list"]),
        workspaces.clone(),
        list(&["policies", "list"]),
        list(&["pools", "list", "--workspace", workspace]),
        list(&["workflows", "list", "--workspace", workspace]),
        list(&["reviews", "list", "--plugin", plugin]),
    ];
    for workspace in workspaces.as_array().unwrap() {
        let id = workspace["id"].as_str().unwrap();
        listed.push(list(&["environments", "list", "--workspace", id]));
    }
    listed.push(list(&["users", "list"]));
    let mut tokens = list(&["tokens", "list"]);
    for token in tokens.as_array_mut().unwrap() {
        if token["id"] == token_id {
            let fields = token.as_object_mut().unwrap();
            fields.retain(|key, _| !key.starts_with("lastUsed"));
        }
    }
    listed.push(tokens);
    listed
}

/// `cpctl` over HTTP to `server` with `token`: nothing in its environment but the `CPCTL_*`
/// pair and a config folder that need not exist (with both set, no file is read).
pub(crate) fn remote(server: &Server, token: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args(args)
        .env_clear()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("cp-copy-no-config"),
        )
        .env("CPCTL_SERVER", &server.base)
        .env("CPCTL_TOKEN", token)
        .output()
        .unwrap()
}

/// `cpctl … -o json` over HTTP that must succeed, parsed.
pub(crate) fn remote_json(server: &Server, token: &str, args: &[&str]) -> Value {
    let o = ok(remote(server, token, &[args, &["-o", "json"]].concat()));
    serde_json::from_slice(&o.stdout).unwrap()
}

pub(crate) fn write_temp(dir: &TempDir, name: &str, bytes: &[u8]) -> String {
    let path = dir.0.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}
