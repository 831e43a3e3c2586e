//! Issue #14's crash drill: keyed mutations in flight, the server killed with SIGKILL,
//! restarted, every key retried with the same body until it is answered, and the effects counted.
//! A key that created two commands is a double execution.
//!
//! This program runs the server itself (it must kill and restart it). Env: SERVER_BIN (the
//! release binary), DATABASE_URL (postgres://… or sqlite://…), REDIS_URL (optional: without it
//! the server keeps its fast state embedded), PORT, DRILL_ROUNDS (default 3), DRILL_KEYS (per
//! round, default 240). `tests/drills/crash.sh` runs it on both backends.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, ExpiresInDays};
use control_plane::service::BootstrapInput;
use control_plane::startup::open_services;
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Server {
    child: Option<Child>,
    port: u16,
    base: String,
}

impl Server {
    fn start(port: u16) -> Res<Self> {
        let bin = std::env::var("SERVER_BIN")?;
        let child = Command::new(bin)
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--log-format",
                "json",
            ])
            // Budgets would only add 429s to the retries; this drill is about crashes.
            .args(["--rate-limit", "off", "--user-rate-limit", "off"])
            .args(["--org-rate-limit", "off", "--issue-rate-limit", "off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Self {
            child: Some(child),
            port,
            base: format!("http://127.0.0.1:{port}"),
        })
    }

    async fn ready(&self, client: &reqwest::Client) -> Res<()> {
        for _ in 0..200 {
            if let Ok(r) = client.get(format!("{}/readyz", self.base)).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("the server on {} did not become ready", self.port).into())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Child::kill is SIGKILL on Unix: no drain, no shutdown hook.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Default)]
struct Round {
    answered_before_kill: usize,
    in_progress_answers: usize,
    retries: usize,
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    key: &str,
    body: &serde_json::Value,
) -> Result<reqwest::Response, reqwest::Error> {
    client
        .post(url)
        .bearer_auth(token)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
}

/// Commands created more than once for one key, by their command name (one name per key).
async fn doubles(database_url: &str, prefix: &str) -> Res<(i64, i64)> {
    let like = format!("{prefix}%");
    let query = "SELECT COUNT(*), CAST(COALESCE(SUM(n - 1), 0) AS BIGINT) FROM \
                 (SELECT COUNT(*) AS n FROM runner_commands WHERE command LIKE $1 GROUP BY command) c";
    let query_sqlite = query.replace("$1", "?1");
    if database_url.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(database_url).await?;
        let row: (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(query_sqlite))
            .bind(like)
            .fetch_one(&pool)
            .await?;
        pool.close().await;
        Ok(row)
    } else {
        let pool = sqlx::PgPool::connect(database_url).await?;
        let row: (i64, i64) = sqlx::query_as(query).bind(like).fetch_one(&pool).await?;
        pool.close().await;
        Ok(row)
    }
}

/// The audit log after the drill: (workspace events with no sequence, workspaces whose
/// sequence has a gap or a repeat, commands without exactly one `runner_command.submitted`
/// event). A kill between a commit and its numbering leaves events waiting until a server
/// numbers them (within a second of starting), so this is read with the server up.
async fn audit_faults(database_url: &str) -> Res<(i64, i64, i64)> {
    let query = "SELECT
           (SELECT COUNT(*) FROM audit_events WHERE workspace_id IS NOT NULL AND seq IS NULL),
           (SELECT COUNT(*) FROM (SELECT workspace_id FROM audit_events
               WHERE workspace_id IS NOT NULL AND seq IS NOT NULL GROUP BY workspace_id
               HAVING MAX(seq) <> COUNT(*) OR COUNT(DISTINCT seq) <> COUNT(*)) g),
           (SELECT COUNT(*) FROM runner_commands c WHERE (SELECT COUNT(*) FROM audit_events e
               WHERE e.event_type = 'runner_command.submitted' AND e.target_id = c.id) <> 1)";
    if database_url.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(database_url).await?;
        let row = sqlx::query_as(query).fetch_one(&pool).await?;
        pool.close().await;
        Ok(row)
    } else {
        let pool = sqlx::PgPool::connect(database_url).await?;
        let row = sqlx::query_as(query).fetch_one(&pool).await?;
        pool.close().await;
        Ok(row)
    }
}

#[tokio::main]
async fn main() -> Res<()> {
    let database_url = std::env::var("DATABASE_URL")?;
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(18091);
    let rounds: usize = std::env::var("DRILL_ROUNDS")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3);
    let keys: usize = std::env::var("DRILL_KEYS")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(240);
    // Set-up through the service layer, then closed: the embedded store serves one process.
    let (token, workspace, pool) = {
        let mut config = ServerConfig::for_database(database_url.clone());
        config.token_hash_key = std::env::var("CP_TOKEN_HASH_KEY").ok();
        let services = open_services(&config).await?;
        let cid = CorrelationId::generate();
        let boot = services
            .bootstrap(
                BootstrapInput {
                    organisation: format!("crash-{}", uuid::Uuid::new_v4().simple()),
                    workspace: "main".into(),
                    admin_email: "crash@drill.test".into(),
                    expires_in_days: ExpiresInDays::default(),
                },
                &cid,
            )
            .await?;
        let pool = services
            .create_pool(boot.workspace.id, "crash", &cid)
            .await?;
        (
            boot.credential.secret.expose().to_owned(),
            boot.workspace.id,
            pool.id,
        )
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(0)
        .build()?;
    let url = format!("http://127.0.0.1:{port}/v1/workspaces/{workspace}/runner-commands");
    let mut server = Server::start(port)?;
    server.ready(&client).await?;
    let started = Instant::now();
    let (mut total_doubles, mut total_keys) = (0i64, 0usize);
    for round in 0..rounds {
        let prefix = format!("crash-{round}-{}-", uuid::Uuid::new_v4().simple());
        let bodies: Arc<Vec<(String, serde_json::Value)>> = Arc::new(
            (0..keys)
                .map(|i| {
                    (
                        uuid::Uuid::new_v4().to_string(),
                        json!({ "poolId": pool, "command": format!("{prefix}{i}") }),
                    )
                })
                .collect(),
        );
        let mut stats = Round::default();
        // Every key in flight, 32 at a time; the server is killed once half are answered.
        let answered = Arc::new(AtomicUsize::new(0));
        let next = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..32)
            .map(|_| {
                let (client, url, token) = (client.clone(), url.clone(), token.clone());
                let (bodies, answered, next) = (bodies.clone(), answered.clone(), next.clone());
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((key, body)) = bodies.get(i) else {
                            return;
                        };
                        if let Ok(r) = post(&client, &url, &token, key, body).await
                            && r.status().is_success()
                        {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        while answered.load(Ordering::Relaxed) < keys / 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        server.kill();
        for worker in workers {
            let _ = worker.await;
        }
        stats.answered_before_kill = answered.load(Ordering::Relaxed);
        server = Server::start(port)?;
        server.ready(&client).await?;
        // Every key again, with the same body, until it is answered with a 2xx.
        let mut pending: Vec<usize> = (0..keys).collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut other: HashMap<u16, usize> = HashMap::new();
        while !pending.is_empty() && Instant::now() < deadline {
            let mut still = Vec::new();
            for i in pending {
                let (key, body) = &bodies[i];
                stats.retries += 1;
                match post(&client, &url, &token, key, body).await {
                    Ok(r) if r.status().is_success() => {}
                    Ok(r) if r.status() == 409 => {
                        stats.in_progress_answers += 1;
                        still.push(i);
                    }
                    Ok(r) => {
                        *other.entry(r.status().as_u16()).or_default() += 1;
                        still.push(i);
                    }
                    Err(_) => still.push(i),
                }
            }
            pending = still;
            if !pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        if !pending.is_empty() {
            return Err(format!("{} keys never answered: {other:?}", pending.len()).into());
        }
        let (commands, doubled) = doubles(&database_url, &prefix).await?;
        println!(
            "round {round}: {keys} keys, {} answered before the SIGKILL; after the restart {} \
             retries ({} answered 409 in progress); {commands} keys with a command, {doubled} \
             double executions",
            stats.answered_before_kill, stats.retries, stats.in_progress_answers
        );
        total_doubles += doubled;
        total_keys += keys;
    }
    // Let the running server's audit feed number anything a kill left waiting (it polls
    // every second), then read the log with it still up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (unnumbered, gapped, unevented) = audit_faults(&database_url).await?;
    server.kill();
    println!(
        "total: {rounds} kills, {total_keys} keys, {total_doubles} double executions ({:.0} s); \
         audit log: {unnumbered} unnumbered events, {gapped} workspaces with a gap or repeat, \
         {unevented} commands without exactly one submitted event",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
