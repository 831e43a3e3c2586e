//! Issue #16's figures: outgoing webhook deliveries, end to end, in one process on loopback.
//!
//! Starts the control plane in process (`Application::build`) on a fresh records store
//! (Postgres by default, `--sqlite` for the embedded store; Redis when `REDIS_URL` is set; rate
//! limits off), bootstraps a tenant, and measures in one run:
//!
//! - **floor**: a minimal receiver (a poem handler answering 204) hit directly by a reqwest
//!   client at the same concurrency with a dispatch-sized signed body;
//! - **dispatch**: the same receiver as a runner's delivery URL; N commands submitted over
//!   HTTP, C at once; a delivery's latency runs from just before its submission was sent to
//!   the receiver's handler entry for its `webhook-id` (same process, so the instants compare);
//! - **backlog drain**: N deliveries queued while the pool's runner has no URL, then the URL
//!   set: how fast the dispatcher alone empties a backlog;
//! - **end to end**: the example runner (`cpctl runners serve`, in process) as the delivery
//!   URL; N commands submitted, C at once, until all are `succeeded` (its three signed reports
//!   each); latency is the store's own `created_at` → `updated_at` of each command.
//!
//! `cargo run --release -p cpctl --example delivery_bench -- [--sqlite] [-n N] [-c C]`
//! (`tests/bench/deliveries.sh` runs both backends). Prints one Markdown row per measurement.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use control_plane::config::{RateOption, ServerConfig};
use control_plane::domain::{
    CorrelationId, DISPATCH_EVENT_TYPE, DispatchData, DispatchPayload, ExpiresInDays, Timestamp,
    WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER, WebhookSigner,
};
use control_plane::service::{BootstrapInput, Services};
use control_plane::startup::Application;
use cpctl::runner::{RunnerConfig, RunnerServer};
use poem::listener::{Acceptor, Listener};
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

#[derive(Parser)]
struct Args {
    /// Commands per measurement.
    #[arg(short = 'n', long, env = "BENCH_N", default_value_t = 2000)]
    n: usize,
    /// Requests in flight at once (submissions, and the floor's requests).
    #[arg(short = 'c', long, env = "BENCH_C", default_value_t = 16)]
    concurrency: usize,
    /// Requests of the floor (it is fast; more of them steady the figure).
    #[arg(long, env = "BENCH_FLOOR_N", default_value_t = 20_000)]
    floor_n: usize,
    /// Runners in the dispatch and backlog pools, all receiving at the minimal receiver (the
    /// dispatcher takes them in turn); the end-to-end pool has one example runner.
    #[arg(long, env = "BENCH_RUNNERS", default_value_t = 1)]
    runners: usize,
    /// The embedded store (an SQLite file in a temporary folder) instead of Postgres.
    #[arg(long)]
    sqlite: bool,
    /// Postgres server (no database part); a fresh database is made and dropped.
    #[arg(
        long,
        env = "BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432"
    )]
    postgres: String,
    /// How long any one measurement may take before the run fails.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
}

/// Arrival instants at the minimal receiver, by `webhook-id`.
type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

/// A fresh records store, and how to take it away.
enum Place {
    Postgres { base: String, name: String },
    Sqlite(std::path::PathBuf),
}

/// The same store, read by the benchmark to count what ended (set-up, not measured).
enum Db {
    Pg(sqlx::PgPool),
    Lite(sqlx::SqlitePool),
}

impl Db {
    async fn count(&self, sql: &str, pool: Uuid) -> anyhow::Result<usize> {
        let (n,): (i64,) = match self {
            Db::Pg(p) => {
                sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(pool)
                    .fetch_one(p)
                    .await?
            }
            Db::Lite(p) => {
                sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(pool)
                    .fetch_one(p)
                    .await?
            }
        };
        Ok(usize::try_from(n).unwrap_or_default())
    }

    /// Lease statements that started a pool's attempts: a lease stamps every attempt it takes
    /// with one `started_at`, so distinct values count leases (ties could only undercount).
    async fn leases(&self, pool: Uuid) -> anyhow::Result<usize> {
        self.count(
            "SELECT COUNT(DISTINCT a.started_at) FROM webhook_attempts a
             JOIN webhook_deliveries d ON d.id = a.delivery_id
             JOIN runner_commands c ON c.id = d.command_id WHERE c.pool_id = $1",
            pool,
        )
        .await
    }

    /// From each command's `created_at` to its `updated_at`, for a pool's commands but the
    /// `skip` created first (the warm-up, all ended before the others were submitted).
    async fn command_spans(&self, pool: Uuid, skip: usize) -> anyhow::Result<Vec<Duration>> {
        let sql = "SELECT created_at, updated_at FROM runner_commands WHERE pool_id = $1
                   ORDER BY created_at";
        type Row = (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>);
        let rows: Vec<Row> = match self {
            Db::Pg(p) => sqlx::query_as(sql).bind(pool).fetch_all(p).await?,
            Db::Lite(p) => sqlx::query_as(sql).bind(pool).fetch_all(p).await?,
        };
        Ok(rows
            .into_iter()
            .skip(skip)
            .map(|(a, b)| (b - a).to_std().unwrap_or_default())
            .collect())
    }
}

async fn fresh_store(args: &Args) -> anyhow::Result<(String, Place)> {
    if args.sqlite {
        let dir =
            std::env::temp_dir().join(format!("cp-delivery-bench-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let url = format!("sqlite://{}", dir.join("cp.db").display());
        return Ok((url, Place::Sqlite(dir)));
    }
    let base = args.postgres.trim_end_matches('/').to_owned();
    let name = format!("cp_delivery_bench_{}", Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&format!("{base}/postgres"))
        .await
        .context("Postgres does not answer (--sqlite runs on the embedded store)")?;
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await?;
    Ok((format!("{base}/{name}"), Place::Postgres { base, name }))
}

async fn remove_store(place: Place) {
    match place {
        Place::Sqlite(dir) => {
            let _ = std::fs::remove_dir_all(dir);
        }
        Place::Postgres { base, name } => {
            if let Ok(mut admin) = PgConnection::connect(&format!("{base}/postgres")).await {
                let _ = admin
                    .execute(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .await;
            }
        }
    }
}

/// Marks a phase's start on stderr with the wall clock, to line up samples taken outside
/// (`pg_stat_activity`) with what was running.
fn phase(name: &str) {
    eprintln!(
        "phase {name} at {}",
        chrono::Utc::now().format("%H:%M:%S%.3f")
    );
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// The minimal receiver: notes when each request's handler starts, reads the body, answers 204.
async fn start_receiver(arrivals: Arrivals) -> anyhow::Result<String> {
    let endpoint = poem::Route::new().at(
        "/",
        poem::post(poem::endpoint::make(move |req: poem::Request| {
            let arrivals = arrivals.clone();
            async move {
                let at = Instant::now();
                if let Some(id) = req
                    .headers()
                    .get(WEBHOOK_ID_HEADER)
                    .and_then(|v| v.to_str().ok())
                {
                    arrivals
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(id.to_owned())
                        .or_insert(at);
                }
                let _ = req.into_body().into_bytes().await;
                poem::http::StatusCode::NO_CONTENT
            }
        })),
    );
    let acceptor = poem::listener::TcpListener::bind("127.0.0.1:0")
        .into_acceptor()
        .await?;
    let port = acceptor.local_addr()[0]
        .as_socket_addr()
        .context("no socket address")?
        .port();
    tokio::spawn(poem::Server::new_with_acceptor(acceptor).run(endpoint));
    Ok(format!("http://127.0.0.1:{port}/"))
}

/// Runs `total` calls of `one(i)`, `concurrency` at once; returns each call's result.
async fn in_parallel<T, F, Fut>(total: usize, concurrency: usize, one: F) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let one = Arc::new(one);
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (next, one) = (next.clone(), one.clone());
        workers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return anyhow::Ok(out);
                }
                out.push(one(i).await?);
            }
        }));
    }
    let mut all = Vec::with_capacity(total);
    for worker in workers {
        all.extend(worker.await??);
    }
    Ok(all)
}

struct Row {
    measure: String,
    count: usize,
    per_second: f64,
    latency: Option<(Duration, Duration)>,
}

/// A control plane in process with a tenant.
struct Bench {
    base: String,
    services: Arc<Services>,
    workspace: Uuid,
    token: String,
    client: reqwest::Client,
}

impl Bench {
    /// A pool with `runners` runners (each with a key), receiving at `url` when given.
    async fn pool(
        &self,
        name: &str,
        url: Option<&str>,
        runners: usize,
    ) -> anyhow::Result<(Uuid, Vec<control_plane::service::RegisteredRunner>)> {
        let cid = CorrelationId::generate();
        let pool = self
            .services
            .create_pool(self.workspace, name, &cid)
            .await?
            .id;
        let mut registered = Vec::new();
        for i in 0..runners.max(1) {
            let runner_name = format!("{name}-runner-{i}");
            registered.push(
                self.services
                    .register_runner(pool, &runner_name, None, url, &cid)
                    .await?,
            );
        }
        Ok((pool, registered))
    }

    /// Submits N commands to `pool`, C at once: (delivery id, instant just before sending).
    async fn submit_all(
        &self,
        pool: Uuid,
        n: usize,
        concurrency: usize,
    ) -> anyhow::Result<Vec<(String, Instant)>> {
        let url = format!(
            "{}/v1/workspaces/{}/runner-commands",
            self.base, self.workspace
        );
        let (client, token) = (self.client.clone(), self.token.clone());
        in_parallel(n, concurrency, move |_| {
            let (client, url, token) = (client.clone(), url.clone(), token.clone());
            async move {
                let body = json!({ "poolId": pool, "command": "deploy", "args": ["--env", "prod"], "timeoutSeconds": 120 });
                let started = Instant::now();
                let response = client.post(&url).bearer_auth(&token).json(&body).send().await?;
                let status = response.status();
                let answer: Value = response.json().await.unwrap_or(Value::Null);
                if !status.is_success() {
                    bail!("submission answered {status}: {answer}");
                }
                let delivery = answer["command"]["deliveryId"]
                    .as_str()
                    .context("no deliveryId in the submission's answer")?
                    .to_owned();
                Ok((delivery, started))
            }
        })
        .await
    }
}

/// Waits until `arrivals` holds every id of `ids`, or fails after `limit`.
async fn all_arrived(arrivals: &Arrivals, ids: &[String], limit: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + limit;
    loop {
        let missing = {
            let seen = arrivals.lock().unwrap_or_else(|e| e.into_inner());
            ids.iter().filter(|id| !seen.contains_key(*id)).count()
        };
        if missing == 0 {
            return Ok(());
        }
        if Instant::now() > until {
            bail!(
                "{missing} of {} deliveries did not arrive within {limit:?}",
                ids.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A dispatch body and headers of the real size, for the floor.
fn floor_request() -> (String, String, Vec<u8>) {
    let now = chrono::Utc::now();
    let payload = DispatchPayload {
        event_type: DISPATCH_EVENT_TYPE.into(),
        timestamp: Timestamp::new(now),
        data: DispatchData {
            delivery_id: Uuid::new_v4(),
            command_id: Uuid::new_v4(),
            workspace_id: Uuid::new_v4(),
            pool_id: Uuid::new_v4(),
            runner_id: Uuid::new_v4(),
            command: "deploy".into(),
            args: vec!["--env".into(), "prod".into()],
            environment_id: None,
            timeout_seconds: 120,
            deadline_at: Timestamp::new(now + chrono::Duration::seconds(120)),
            attempt: 1,
        },
    };
    let body = serde_json::to_vec(&payload).unwrap_or_default();
    let id = payload.data.delivery_id.to_string();
    let signature = WebhookSigner::from_seeds(&[vec![7u8; 32]])
        .map(|s| s.sign(&id, now.timestamp(), &body, &[]))
        .unwrap_or_default();
    (now.timestamp().to_string(), signature, body)
}

async fn floor(url: &str, arrivals: &Arrivals, args: &Args) -> anyhow::Result<Row> {
    let client = reqwest::Client::new();
    let (timestamp, signature, body) = floor_request();
    let run = |total: usize| {
        let (client, url) = (client.clone(), url.to_owned());
        let (timestamp, signature, body) = (timestamp.clone(), signature.clone(), body.clone());
        in_parallel(total, args.concurrency, move |_| {
            let (client, url) = (client.clone(), url.clone());
            let (timestamp, signature, body) = (timestamp.clone(), signature.clone(), body.clone());
            async move {
                let started = Instant::now();
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header(WEBHOOK_ID_HEADER, Uuid::new_v4().to_string())
                    .header(WEBHOOK_TIMESTAMP_HEADER, timestamp)
                    .header(WEBHOOK_SIGNATURE_HEADER, signature)
                    .body(body)
                    .send()
                    .await?;
                if response.status() != reqwest::StatusCode::NO_CONTENT {
                    bail!("the receiver answered {}", response.status());
                }
                let _ = response.bytes().await?;
                Ok(started.elapsed())
            }
        })
    };
    // Warm-up: connections open, pages touched.
    run(args.floor_n / 10).await?;
    let started = Instant::now();
    let mut latencies = run(args.floor_n).await?;
    let elapsed = started.elapsed();
    arrivals.lock().unwrap_or_else(|e| e.into_inner()).clear();
    latencies.sort();
    Ok(Row {
        measure: "floor: reqwest → minimal receiver (204)".into(),
        count: args.floor_n,
        per_second: args.floor_n as f64 / elapsed.as_secs_f64(),
        latency: Some((percentile(&latencies, 0.5), percentile(&latencies, 0.99))),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (database_url, place) = fresh_store(&args).await?;
    let result = run(&args, &database_url).await;
    remove_store(place).await;
    result
}

async fn run(args: &Args, database_url: &str) -> anyhow::Result<()> {
    let mut config = ServerConfig::for_database(database_url);
    // The bench's runners listen on loopback over plain http.
    config.delivery_http_hosts = Some(control_plane::domain::EgressPolicy::LOOPBACK.into());
    let redis = std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty());
    config.redis_url = redis.clone();
    config.redis_prefix = format!("delivery-bench-{}:", Uuid::new_v4().simple());
    // What is measured is the delivery path, not the limits.
    for rate in [
        &mut config.rate_limit,
        &mut config.user_rate_limit,
        &mut config.org_rate_limit,
        &mut config.issue_rate_limit,
        &mut config.ops_rate_limit,
        &mut config.runner_address_rate_limit,
        &mut config.runner_rate_limit,
    ] {
        *rate = RateOption(None);
    }
    let app = Application::build(&config)
        .await
        .context("build the server")?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let services = app.services();
    let server = tokio::spawn(app.run());
    let cid = CorrelationId::generate();
    let done = services
        .bootstrap(
            BootstrapInput {
                organisation: "delivery-bench".into(),
                workspace: "main".into(),
                admin_email: "admin@bench.test".into(),
                expires_in_days: ExpiresInDays::parse(30).map_err(anyhow::Error::msg)?,
            },
            &cid,
        )
        .await?;
    let bench = Bench {
        base: base.clone(),
        services: services.clone(),
        workspace: done.workspace.id,
        token: done.credential.secret.expose().to_owned(),
        client: reqwest::Client::new(),
    };
    let db = if args.sqlite {
        Db::Lite(sqlx::SqlitePool::connect(database_url).await?)
    } else {
        Db::Pg(sqlx::PgPool::connect(database_url).await?)
    };
    let limit = Duration::from_secs(args.timeout_secs);
    let backend = match (args.sqlite, redis.is_some()) {
        (true, _) => "SQLite (embedded)",
        (false, true) => "Postgres + Redis",
        (false, false) => "Postgres",
    };
    eprintln!(
        "== {backend}: N={} C={} floor N={} runners={}",
        args.n, args.concurrency, args.floor_n, args.runners
    );

    let many = match args.runners {
        0 | 1 => String::new(),
        k => format!(" ({k} runners)"),
    };
    let arrivals: Arrivals = Arc::default();
    let receiver = start_receiver(arrivals.clone()).await?;
    let mut rows = vec![floor(&receiver, &arrivals, args).await?];

    // Dispatch: submission to the receiver's handler.
    let (pool, _) = bench
        .pool("dispatch", Some(&receiver), args.runners)
        .await?;
    // Warm-up: connections to the server and from the dispatcher opened.
    let warm = bench
        .submit_all(pool, args.concurrency * 4, args.concurrency)
        .await?;
    let warm_ids: Vec<String> = warm.into_iter().map(|(id, _)| id).collect();
    all_arrived(&arrivals, &warm_ids, limit).await?;
    arrivals.lock().unwrap_or_else(|e| e.into_inner()).clear();
    phase("dispatch");
    let submitted = bench.submit_all(pool, args.n, args.concurrency).await?;
    let submitted_by = Instant::now();
    let ids: Vec<String> = submitted.iter().map(|(id, _)| id.clone()).collect();
    all_arrived(&arrivals, &ids, limit).await?;
    phase("dispatch done");
    let (mut latencies, first, last) = {
        let seen = arrivals.lock().unwrap_or_else(|e| e.into_inner());
        let latencies: Vec<Duration> = submitted
            .iter()
            .map(|(id, at)| seen[id].saturating_duration_since(*at))
            .collect();
        let first = submitted.iter().map(|(_, at)| *at).min().context("none")?;
        let last = ids.iter().map(|id| seen[id]).max().context("none")?;
        (latencies, first, last)
    };
    latencies.sort();
    rows.push(Row {
        measure: "submissions alone (HTTP, until the last answer)".into(),
        count: args.n,
        per_second: args.n as f64 / (submitted_by - first).as_secs_f64(),
        latency: None,
    });
    rows.push(Row {
        measure: format!("dispatch: submission → receiver's handler{many}"),
        count: args.n,
        per_second: args.n as f64 / (last - first).as_secs_f64(),
        latency: Some((percentile(&latencies, 0.5), percentile(&latencies, 0.99))),
    });

    let dispatch_pool = pool;
    // Backlog drain: N deliveries waiting for a runner, then the runner gets its URL.
    let (pool, runners) = bench.pool("backlog", None, args.runners).await?;
    arrivals.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let submitted = bench.submit_all(pool, args.n, args.concurrency).await?;
    let ids: Vec<String> = submitted.into_iter().map(|(id, _)| id).collect();
    let waiting =
        "SELECT COUNT(*) FROM webhook_deliveries d JOIN runner_commands c ON c.id = d.command_id
                   WHERE c.pool_id = $1 AND d.waiting_for_runner";
    let until = Instant::now() + limit;
    while db.count(waiting, pool).await? < args.n {
        if Instant::now() > until {
            bail!("the backlog's deliveries were not all set waiting within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    phase("backlog drain");
    let woken = Instant::now();
    for runner in &runners {
        services
            .set_runner_url(runner.runner.id, Some(&receiver), &cid)
            .await?;
    }
    all_arrived(&arrivals, &ids, limit).await?;
    phase("backlog drain done");
    let last = {
        let seen = arrivals.lock().unwrap_or_else(|e| e.into_inner());
        ids.iter().map(|id| seen[id]).max().context("none")?
    };
    rows.push(Row {
        measure: format!("backlog drain: runner URL set → last arrival{many}"),
        count: args.n,
        per_second: args.n as f64 / (last - woken).as_secs_f64(),
        latency: None,
    });

    // Why the rates are what they are: how many deliveries each lease took, on average.
    for (name, pool, sent) in [
        ("dispatch", dispatch_pool, args.n + args.concurrency * 4),
        ("backlog drain", pool, args.n),
    ] {
        let leases = db.leases(pool).await?;
        eprintln!(
            "{name}: {sent} attempts in {leases} leases ({:.1} a lease)",
            sent as f64 / leases.max(1) as f64
        );
    }

    // End to end: the example runner verifies, answers 202 and reports three times.
    let (pool, registered) = bench.pool("e2e", None, 1).await?;
    let registered = registered.into_iter().next().context("a runner")?;
    let runner = RunnerServer::bind(RunnerConfig {
        listen: "127.0.0.1:0".into(),
        control_plane: base.clone(),
        runner_id: registered.runner.id,
        key_id: registered.key_id,
        private_key: registered.private_key.context("a generated key")?,
        webhook_secret: Some(registered.webhook_secret.clone()),
        pinned_keys: vec![],
        dedup_capacity: args.n * 2 + 100,
    })
    .await?;
    let runner_url = format!("http://127.0.0.1:{}/", runner.port());
    let runner_task = tokio::spawn(runner.run());
    services
        .set_runner_url(registered.runner.id, Some(&runner_url), &cid)
        .await?;
    let succeeded =
        "SELECT COUNT(*) FROM runner_commands WHERE pool_id = $1 AND status = 'succeeded'";
    // Warm-up on a pool of its own would need a second runner; a handful here is enough to
    // open the runner's connections, and is left out of the count below.
    let warm = args.concurrency;
    bench.submit_all(pool, warm, args.concurrency).await?;
    let until = Instant::now() + limit;
    while db.count(succeeded, pool).await? < warm {
        if Instant::now() > until {
            bail!("the warm-up commands did not succeed within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    phase("end to end");
    let submitted = bench.submit_all(pool, args.n, args.concurrency).await?;
    let submitted_by = Instant::now();
    let first = submitted.iter().map(|(_, at)| *at).min().context("none")?;
    let until = Instant::now() + limit;
    loop {
        let done = db.count(succeeded, pool).await? - warm;
        if done >= args.n {
            break;
        }
        if Instant::now() > until {
            bail!("{done} of {} commands succeeded within {limit:?}", args.n);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let all_done = Instant::now();
    phase("end to end done");
    let mut spans = db.command_spans(pool, warm).await?;
    spans.sort();
    rows.push(Row {
        measure: "submissions alone, with the runner reporting".into(),
        count: args.n,
        per_second: args.n as f64 / (submitted_by - first).as_secs_f64(),
        latency: None,
    });
    rows.push(Row {
        measure: "end to end: submission → `succeeded` (example runner)".into(),
        count: args.n,
        per_second: args.n as f64 / (all_done - first).as_secs_f64(),
        latency: Some((percentile(&spans, 0.5), percentile(&spans, 0.99))),
    });
    runner_task.abort();
    server.abort();

    let floor_rate = rows[0].per_second;
    println!("| backend | measure | count | per s | p50 ms | p99 ms | / floor |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for row in &rows {
        let (p50, p99) = row
            .latency
            .map_or(("–".into(), "–".into()), |(a, b)| (ms(a), ms(b)));
        println!(
            "| {backend} | {} | {} | {:.0} | {p50} | {p99} | {:.3} |",
            row.measure,
            row.count,
            row.per_second,
            row.per_second / floor_rate
        );
    }
    Ok(())
}
