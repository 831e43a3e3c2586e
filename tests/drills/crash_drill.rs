//! The crash drill: keyed `POST runner-commands` in flight, the server killed with SIGKILL,
//! restarted, every key retried with the same body until it is answered 2xx (waiting each
//! answer's `retry-after`), and the effects checked against [`CRITERIA`]. Exits non-zero naming
//! every criterion that failed.
//!
//! This program runs the server itself (it must kill and restart it). Env: SERVER_BIN (the
//! release binary), DATABASE_URL (postgres://… or sqlite://…), REDIS_URL (optional: without it
//! the server keeps its fast state embedded), PORT, DRILL_ROUNDS (default 3), DRILL_KEYS (per
//! round, default 240). `tests/drills/crash.sh` runs it on both backends.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
        // A minute: a debug build (the fault-switch run) compiles its policies slowly.
        for _ in 0..1200 {
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

/// What the drill promises, printed before it starts and checked at the end; a run that breaks
/// any of them exits non-zero with a line naming it. RELIABILITY.md quotes these words.
const CRITERIA: [&str; 7] = [
    "0 double executions: no key has more than one command",
    "exactly one command per answered key: every key is answered 2xx and has one command, the one every 2xx answer for it names",
    "every 2xx answered write present after restart: each command answered before the kill exists after it",
    "0 unnumbered events",
    "0 gaps: every workspace's sequence runs 1..n without a gap or repeat, and every command has exactly one runner_command.submitted event",
    "minimum work: at least half of each round's keys answered 2xx before the kill, every key answered within 120 s of the restart",
    "the kill landing while work is in flight: at least one request sent and not yet answered when SIGKILL is sent",
];

/// A failed criterion, by its index in [`CRITERIA`], with the figure that broke it.
struct Failure(usize, String);

#[derive(Default)]
struct Round {
    answered_before_kill: usize,
    in_flight_at_kill: usize,
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

/// The command id a 2xx answer names.
async fn answered_id(response: reqwest::Response) -> Option<String> {
    let body: serde_json::Value = response.json().await.ok()?;
    body["command"]["id"].as_str().map(str::to_owned)
}

/// The `retry-after` of an answer, in seconds, when it has one.
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let value = response.headers().get("retry-after")?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Every command of a round by its name (one name per key), with its ids: a name with two ids
/// is a double execution.
async fn commands(database_url: &str, prefix: &str) -> Res<HashMap<String, Vec<uuid::Uuid>>> {
    let like = format!("{prefix}%");
    let query = "SELECT command, id FROM runner_commands WHERE command LIKE $1";
    let rows: Vec<(String, uuid::Uuid)> = if database_url.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(database_url).await?;
        let rows = sqlx::query_as(sqlx::AssertSqlSafe(query.replace("$1", "?1")))
            .bind(like)
            .fetch_all(&pool)
            .await?;
        pool.close().await;
        rows
    } else {
        let pool = sqlx::PgPool::connect(database_url).await?;
        let rows = sqlx::query_as(query).bind(like).fetch_all(&pool).await?;
        pool.close().await;
        rows
    };
    let mut by_name: HashMap<String, Vec<uuid::Uuid>> = HashMap::new();
    for (name, id) in rows {
        by_name.entry(name).or_default().push(id);
    }
    Ok(by_name)
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
            .create_pool(
                boot.workspace.id,
                "crash",
                &control_plane::storage::WriteContext::admin(&cid),
            )
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
    println!("crash drill: {rounds} rounds of {keys} keyed POST runner-commands, one SIGKILL each");
    println!("criteria (the run exits non-zero naming each one that fails):");
    for (n, criterion) in CRITERIA.iter().enumerate() {
        println!("  {}. {criterion}", n + 1);
    }
    let mut failures: Vec<Failure> = Vec::new();
    let mut server = Server::start(port)?;
    server.ready(&client).await?;
    let started = Instant::now();
    let (mut total_doubles, mut total_keys) = (0usize, 0usize);
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
        // Every id a 2xx answer named, by key index, before and after the kill.
        let named: Arc<Mutex<Vec<Vec<String>>>> = Arc::new(Mutex::new(vec![Vec::new(); keys]));
        // Every key in flight, 32 at a time; the server is killed once half are answered.
        let answered = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let next = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..32)
            .map(|_| {
                let (client, url, token) = (client.clone(), url.clone(), token.clone());
                let (bodies, answered, next) = (bodies.clone(), answered.clone(), next.clone());
                let (in_flight, named) = (in_flight.clone(), named.clone());
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((key, body)) = bodies.get(i) else {
                            return;
                        };
                        in_flight.fetch_add(1, Ordering::SeqCst);
                        let sent = post(&client, &url, &token, key, body).await;
                        if let Ok(r) = sent
                            && r.status().is_success()
                        {
                            let id = answered_id(r).await.unwrap_or_default();
                            lock(&named)[i].push(id);
                            answered.fetch_add(1, Ordering::SeqCst);
                        }
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        let waiting = Instant::now();
        while answered.load(Ordering::SeqCst) < keys / 2
            && waiting.elapsed() < Duration::from_secs(120)
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        stats.in_flight_at_kill = in_flight.load(Ordering::SeqCst);
        server.kill();
        for worker in workers {
            let _ = worker.await;
        }
        stats.answered_before_kill = answered.load(Ordering::SeqCst);
        let before_kill: Vec<Vec<String>> = lock(&named).clone();
        if stats.answered_before_kill < keys / 2 {
            failures.push(Failure(
                5,
                format!(
                    "round {round}: {} of {keys} keys answered 2xx before the kill",
                    stats.answered_before_kill
                ),
            ));
        }
        if stats.in_flight_at_kill == 0 {
            failures.push(Failure(
                6,
                format!("round {round}: no request in flight at the kill"),
            ));
        }
        server = Server::start(port)?;
        server.ready(&client).await?;
        // Every key again, with the same body, until it is answered with a 2xx; a pass that got
        // a `retry-after` waits the longest one before the next.
        let mut pending: Vec<usize> = (0..keys).collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut other: HashMap<u16, usize> = HashMap::new();
        while !pending.is_empty() && Instant::now() < deadline {
            let mut still = Vec::new();
            let mut wait = Duration::from_millis(100);
            for i in pending {
                let (key, body) = &bodies[i];
                stats.retries += 1;
                match post(&client, &url, &token, key, body).await {
                    Ok(r) if r.status().is_success() => {
                        let id = answered_id(r).await.unwrap_or_default();
                        lock(&named)[i].push(id);
                    }
                    Ok(r) => {
                        if r.status() == 409 {
                            stats.in_progress_answers += 1;
                        } else {
                            *other.entry(r.status().as_u16()).or_default() += 1;
                        }
                        wait = wait.max(retry_after(&r).unwrap_or(wait));
                        still.push(i);
                    }
                    Err(_) => {
                        wait = wait.max(Duration::from_millis(500));
                        still.push(i);
                    }
                }
            }
            pending = still;
            if !pending.is_empty() {
                tokio::time::sleep(wait).await;
            }
        }
        if !pending.is_empty() {
            failures.push(Failure(
                5,
                format!(
                    "round {round}: {} keys never answered 2xx after the restart (other answers: {other:?})",
                    pending.len()
                ),
            ));
        }
        let commands = commands(&database_url, &prefix).await?;
        let named = lock(&named).clone();
        let (mut doubled, mut not_one, mut lost) = (0usize, 0usize, 0usize);
        for (i, (_, body)) in bodies.iter().enumerate() {
            let ids = body["command"]
                .as_str()
                .and_then(|name| commands.get(name))
                .map_or(&[][..], Vec::as_slice);
            doubled += ids.len().saturating_sub(1);
            let only = match ids {
                [only] => Some(only.to_string()),
                _ => None,
            };
            let answers = &named[i];
            if answers.is_empty() || answers.iter().any(|a| Some(a) != only.as_ref()) {
                not_one += 1;
            }
            if before_kill[i]
                .iter()
                .any(|a| !ids.iter().any(|id| id.to_string() == *a))
            {
                lost += 1;
            }
        }
        println!(
            "round {round}: {keys} keys, {} answered before the SIGKILL with {} in flight; after \
             the restart {} retries ({} answered 409 in progress); {} keys with a command, \
             {doubled} double executions, {not_one} keys without exactly the one command their \
             answers name, {lost} answered before the kill and missing after it",
            stats.answered_before_kill,
            stats.in_flight_at_kill,
            stats.retries,
            stats.in_progress_answers,
            commands.len(),
        );
        if doubled > 0 {
            failures.push(Failure(0, format!("round {round}: {doubled}")));
        }
        if not_one > 0 {
            failures.push(Failure(1, format!("round {round}: {not_one} keys")));
        }
        if lost > 0 {
            failures.push(Failure(2, format!("round {round}: {lost} keys")));
        }
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
    if unnumbered > 0 {
        failures.push(Failure(3, format!("{unnumbered} events")));
    }
    if gapped > 0 || unevented > 0 {
        failures.push(Failure(
            4,
            format!("{gapped} workspaces with a gap or repeat, {unevented} commands"),
        ));
    }
    if failures.is_empty() {
        println!("crash drill: every criterion held");
        return Ok(());
    }
    for Failure(n, figure) in &failures {
        println!("FAILED criterion {}: {} ({figure})", n + 1, CRITERIA[*n]);
    }
    Err(format!("{} criteria failed", failures.len()).into())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
