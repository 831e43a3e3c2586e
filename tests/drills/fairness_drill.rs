//! Issue #26's fairness drill: one organisation's runner sleeps on every delivery while that
//! organisation floods the server with commands; another organisation's commands must still
//! reach its runner promptly. `tests/drills/fairness.sh` starts the release server (Postgres)
//! and runs this.
//!
//! Env: DATABASE_URL and CP_TOKEN_HASH_KEY (the server's, for set-up and to read its attempts),
//! SERVER (base URL), DRILL_SECS (flood length, default 30), DRILL_FLOOD_RATE (attacker
//! commands a second, default 100), DRILL_VICTIM_RATE (default 10), DRILL_SLEEP_SECS (how long
//! the attacker's runner holds each delivery, default 30), DRILL_P99_MS (default 1000),
//! DRILL_PER_POOL (the server's `--delivery-per-pool`, default 8), DRILL_SLOTS (its
//! `--delivery-concurrency`, default 32).
//!
//! The criteria are printed first; the drill exits 1 with a `FAILED criterion N` line for each
//! one that broke (the last, no panic in the server log, is the script's to check).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, ExpiresInDays};
use control_plane::service::{BootstrapInput, Services};
use control_plane::startup::open_services;
use poem::listener::{Acceptor, Listener, TcpListener};
use poem::web::Data;
use poem::{EndpointExt, Response, Route, handler, http::StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How long the victim's last commands may take to arrive after the flood ends.
const GRACE: Duration = Duration::from_secs(5);

struct Settings {
    secs: u64,
    flood_rate: u64,
    victim_rate: u64,
    sleep: Duration,
    p99_ms: f64,
    per_pool: usize,
    slots: usize,
}

fn criteria(s: &Settings) -> [String; 4] {
    [
        format!(
            "victim served: every command of the other organisation reaches its runner (within \
             {} s of the flood's end) and p99 from submission to arrival is at most {} ms",
            GRACE.as_secs(),
            s.p99_ms
        ),
        format!(
            "attacker capped: the sleeping runner's attempts in flight (started, unanswered, in \
             the server's records, sampled every 50 ms) never exceed the per-pool cap ({})",
            s.per_pool
        ),
        format!(
            "attack real: the attacker had at least {} commands accepted (4x the {} slots) and \
             its runner held at least one attempt open",
            4 * s.slots,
            s.slots
        ),
        "no panic: the server log holds no panic (tests/drills/fairness.sh checks it)".into(),
    ]
}

/// A runner's delivery URL: records each `webhook-id` with its arrival, holds each request
/// `hold` (none: a 204 at once).
#[derive(Default)]
struct Runner {
    hold: Option<Duration>,
    arrived: Mutex<HashMap<String, Instant>>,
    received: AtomicUsize,
}

#[handler]
async fn receive(runner: Data<&Arc<Runner>>, headers: &poem::http::HeaderMap) -> Response {
    let at = Instant::now();
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    runner.received.fetch_add(1, Ordering::Relaxed);
    runner
        .arrived
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, at);
    if let Some(hold) = runner.hold {
        tokio::time::sleep(hold).await;
        return Response::builder().status(StatusCode::OK).finish();
    }
    Response::builder().status(StatusCode::NO_CONTENT).finish()
}

/// Serves `runner` on a loopback port; returns its URL.
async fn serve(runner: Arc<Runner>) -> Res<String> {
    let acceptor = TcpListener::bind("127.0.0.1:0").into_acceptor().await?;
    let port = acceptor.local_addr()[0]
        .as_socket_addr()
        .ok_or("no socket address")?
        .port();
    let app = Route::new().at("/hooks", poem::post(receive)).data(runner);
    tokio::spawn(async move {
        let _ = poem::Server::new_with_acceptor(acceptor).run(app).await;
    });
    Ok(format!("http://127.0.0.1:{port}/hooks"))
}

struct Tenant {
    workspace: Uuid,
    token: String,
    pool: Uuid,
    runner: Uuid,
}

async fn tenant(services: &Services, name: &str, url: &str) -> Res<Tenant> {
    let cid = CorrelationId::generate();
    let suffix = Uuid::new_v4().simple().to_string();
    let boot = services
        .bootstrap(
            BootstrapInput {
                organisation: format!("{name}-{suffix}"),
                workspace: "main".into(),
                admin_email: format!("{name}-{suffix}@drill.test"),
                expires_in_days: ExpiresInDays::default(),
            },
            &cid,
        )
        .await?;
    let pool = services
        .create_pool(
            boot.workspace.id,
            "drill",
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await?;
    let runner = services
        .register_runner(
            pool.id,
            "drill",
            None,
            Some(url),
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await?;
    Ok(Tenant {
        workspace: boot.workspace.id,
        token: boot.credential.secret.expose().to_owned(),
        pool: pool.id,
        runner: runner.runner.id,
    })
}

/// Submits one command; its delivery id.
async fn submit(client: &reqwest::Client, server: &str, t: &Tenant) -> Option<String> {
    let response = client
        .post(format!(
            "{server}/v1/workspaces/{}/runner-commands",
            t.workspace
        ))
        .bearer_auth(&t.token)
        .json(&json!({"poolId": t.pool, "command": "drill", "args": []}))
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body: Value = response.json().await.ok()?;
    body["command"]["deliveryId"].as_str().map(str::to_owned)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The `q` quantile of sorted `values` (nearest rank).
fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

#[tokio::main]
async fn main() -> Res<()> {
    let server = std::env::var("SERVER").unwrap_or_else(|_| "http://127.0.0.1:18094".into());
    let s = Settings {
        secs: env_u64("DRILL_SECS", 30),
        flood_rate: env_u64("DRILL_FLOOD_RATE", 100).max(1),
        victim_rate: env_u64("DRILL_VICTIM_RATE", 10).max(1),
        sleep: Duration::from_secs(env_u64("DRILL_SLEEP_SECS", 30)),
        p99_ms: env_u64("DRILL_P99_MS", 1000) as f64,
        per_pool: env_u64("DRILL_PER_POOL", 8) as usize,
        slots: env_u64("DRILL_SLOTS", 32) as usize,
    };
    let criteria = criteria(&s);
    println!(
        "# fairness drill against {server}: {} s of {} attacker commands/s (its runner holds \
         each {} s), {} victim commands/s\n\ncriteria:",
        s.secs,
        s.flood_rate,
        s.sleep.as_secs(),
        s.victim_rate
    );
    for (n, criterion) in criteria.iter().enumerate() {
        println!("  {}. {criterion}", n + 1);
    }
    println!();

    let database_url = std::env::var("DATABASE_URL")?;
    let mut config = ServerConfig::for_database(database_url.clone());
    config.token_hash_key = std::env::var("CP_TOKEN_HASH_KEY").ok();
    // The runners listen on loopback over plain http, as the server is told to allow.
    config.delivery_http_hosts = Some(control_plane::domain::EgressPolicy::LOOPBACK.into());
    let services = open_services(&config).await?;
    let records = sqlx::PgPool::connect(&database_url).await?;
    let sleeper = Arc::new(Runner {
        hold: Some(s.sleep),
        ..Runner::default()
    });
    let prompt = Arc::new(Runner::default());
    let attacker = Arc::new(tenant(&services, "attacker", &serve(sleeper.clone()).await?).await?);
    let victim = Arc::new(tenant(&services, "victim", &serve(prompt.clone()).await?).await?);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(256)
        .build()?;

    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let flood = {
        let (client, server, attacker) = (client.clone(), server.clone(), attacker.clone());
        let (stop, accepted, refused) = (stop.clone(), accepted.clone(), refused.clone());
        let every = Duration::from_secs_f64(1.0 / s.flood_rate as f64);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let (client, server, attacker) = (client.clone(), server.clone(), attacker.clone());
                let (accepted, refused) = (accepted.clone(), refused.clone());
                tokio::spawn(async move {
                    match submit(&client, &server, &attacker).await {
                        Some(_) => accepted.fetch_add(1, Ordering::Relaxed),
                        None => refused.fetch_add(1, Ordering::Relaxed),
                    };
                });
            }
        })
    };
    // When each victim command was sent, and the delivery it was answered with.
    type Sent = Vec<(Instant, Option<String>)>;
    let sent: Arc<Mutex<Sent>> = Arc::default();
    let victims = {
        let (client, server, victim) = (client.clone(), server.clone(), victim.clone());
        let (stop, sent) = (stop.clone(), sent.clone());
        let every = Duration::from_secs_f64(1.0 / s.victim_rate as f64);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            let mut submissions = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let (client, server, victim, sent) =
                    (client.clone(), server.clone(), victim.clone(), sent.clone());
                submissions.push(tokio::spawn(async move {
                    let at = Instant::now();
                    let id = submit(&client, &server, &victim).await;
                    sent.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((at, id));
                }));
            }
            for submission in submissions {
                let _ = submission.await;
            }
        })
    };
    // The attacker's attempts in flight, as the server recorded them.
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, peak, runner) = (stop.clone(), peak.clone(), attacker.runner);
        tokio::spawn(async move {
            let mut samples = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let open: Result<(i64,), _> = sqlx::query_as(
                    "SELECT count(*) FROM webhook_attempts
                     WHERE runner_id = $1 AND finished_at IS NULL AND error IS NULL",
                )
                .bind(runner)
                .fetch_one(&records)
                .await;
                if let Ok((open,)) = open {
                    peak.fetch_max(open as usize, Ordering::Relaxed);
                    samples += 1;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            samples
        })
    };

    tokio::time::sleep(Duration::from_secs(s.secs)).await;
    stop.store(true, Ordering::Relaxed);
    let _ = flood.await;
    let _ = victims.await;
    let samples = sampler.await.unwrap_or_default();
    let sent = std::mem::take(&mut *sent.lock().unwrap_or_else(|e| e.into_inner()));
    let waited = Instant::now();
    let missing = loop {
        let arrived = prompt
            .arrived
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let missing = sent
            .iter()
            .filter(|(_, id)| id.as_ref().is_none_or(|id| !arrived.contains_key(id)))
            .count();
        if missing == 0 || waited.elapsed() > GRACE {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let arrived = prompt
        .arrived
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut latencies: Vec<f64> = sent
        .iter()
        .filter_map(|(at, id)| {
            let arrival = arrived.get(id.as_ref()?)?;
            Some(arrival.saturating_duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let (p50, p99) = (quantile(&latencies, 0.5), quantile(&latencies, 0.99));
    let max = latencies.last().copied().unwrap_or(f64::NAN);
    let peak = peak.load(Ordering::Relaxed);
    let accepted = accepted.load(Ordering::Relaxed);
    println!(
        "attacker: {accepted} commands accepted, {} refused; its runner received {} requests; \
         attempts in flight at most {peak} ({samples} samples)",
        refused.load(Ordering::Relaxed),
        sleeper.received.load(Ordering::Relaxed),
    );
    println!(
        "victim: {} commands, {} delivered, {missing} missing; submission to arrival p50 \
         {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms",
        sent.len(),
        latencies.len(),
    );

    let mut failed = Vec::new();
    // A NaN p99 (nothing measured) fails too.
    let p99_within = p99.partial_cmp(&s.p99_ms).is_some_and(|o| o.is_le());
    if missing > 0 || sent.is_empty() || !p99_within {
        failed.push((1, format!("{missing} missing, p99 {p99:.1} ms")));
    }
    if peak > s.per_pool {
        failed.push((2, format!("{peak} attempts in flight at once")));
    }
    if accepted < 4 * s.slots as u64 || peak == 0 {
        failed.push((3, format!("{accepted} accepted, at most {peak} in flight")));
    }
    for (n, why) in &failed {
        println!("FAILED criterion {n} ({}): {why}", criteria[n - 1]);
    }
    if failed.is_empty() {
        println!("criteria 1-3 met");
        Ok(())
    } else {
        std::process::exit(1);
    }
}
