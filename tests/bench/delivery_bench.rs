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

// A crate root's `mod` looks beside it (tests/bench/), so each path names the folder.
#[path = "delivery_bench/bench.rs"]
mod bench;
#[path = "delivery_bench/floor.rs"]
mod floor;
#[path = "delivery_bench/receiver.rs"]
mod receiver;
#[path = "delivery_bench/report.rs"]
mod report;
#[path = "delivery_bench/store.rs"]
mod store;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use control_plane::config::{RateOption, ServerConfig};
use control_plane::domain::{CorrelationId, ExpiresInDays};
use control_plane::service::BootstrapInput;
use control_plane::startup::Application;
use cpctl::runner::{RunnerConfig, RunnerServer};
use uuid::Uuid;

use bench::Bench;
use floor::floor;
use receiver::{Arrivals, all_arrived, start_receiver};
use report::{Row, ms, percentile, phase};
use store::{Db, fresh_store, remove_store};

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
            .set_runner_url(
                runner.runner.id,
                Some(&receiver),
                &control_plane::storage::WriteContext::admin(&cid),
            )
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
        .set_runner_url(
            registered.runner.id,
            Some(&runner_url),
            &control_plane::storage::WriteContext::admin(&cid),
        )
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
