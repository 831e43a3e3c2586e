//! Load for the runner-report and audit fan-out benchmarks, against a running server on the
//! same records store.
//!
//! `ops_load fanout N EVENTS`: N audit-stream subscribers, then EVENTS events published one
//! every 20 ms; prints publish-to-receive percentiles over every (subscriber, event) pair.
//! `ops_load signed CONNS SECS`: signed delivery status reports on fresh deliveries, CONNS at
//! once for SECS; prints reports per second and the CPU cost of one verification.
//!
//! Env: DATABASE_URL (the server's), CP_TOKEN_HASH_KEY (the server's), SERVER (base URL).
//! With OPS_LOAD_ANSWERED=FILE, `signed` also writes to FILE the id of every delivery whose
//! report was answered 2xx (one a line) and prints how the other reports ended (for
//! `tests/drills/batch-crash.sh`, which checks each of those deliveries is reported), writes to
//! FILE.cut-off when each report cut off in flight was sent (Unix milliseconds, one a line), and
//! prints a line when the set-up is done and the reports begin.
//! `tests/bench/operations.sh` runs both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, ExpiresInDays, sign_request};
use control_plane::service::{BootstrapInput, Services};
use control_plane::startup::open_services;
use tokio::sync::Mutex;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Tenant {
    services: Arc<Services>,
    token: String,
    workspace: uuid::Uuid,
    pool: uuid::Uuid,
}

async fn setup() -> Res<Tenant> {
    let mut config = ServerConfig::for_database(std::env::var("DATABASE_URL")?);
    config.token_hash_key = std::env::var("CP_TOKEN_HASH_KEY").ok();
    config.db_max_connections = 16;
    let services = open_services(&config).await?;
    let cid = CorrelationId::generate();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let boot = services
        .bootstrap(
            BootstrapInput {
                organisation: format!("load-{suffix}"),
                workspace: "main".into(),
                admin_email: "load@bench.test".into(),
                expires_in_days: ExpiresInDays::default(),
            },
            &cid,
        )
        .await?;
    let pool = services
        .create_pool(
            boot.workspace.id,
            "load",
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await?;
    Ok(Tenant {
        token: boot.credential.secret.expose().to_owned(),
        workspace: boot.workspace.id,
        pool: pool.id,
        services,
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn fanout(server: &str, subscribers: usize, events: usize) -> Res<()> {
    let t = setup().await?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let url = format!("{server}/v1/workspaces/{}/audit/stream", t.workspace);
    // seq -> receive instants, from every subscriber.
    let received: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let ready = Arc::new(tokio::sync::Semaphore::new(0));
    for _ in 0..subscribers {
        let (client, url, token) = (client.clone(), url.clone(), t.token.clone());
        let (received, ready) = (received.clone(), ready.clone());
        tokio::spawn(async move {
            let Ok(mut response) = client.get(&url).bearer_auth(token).send().await else {
                return;
            };
            let mut buffer = String::new();
            while let Ok(Some(chunk)) = response.chunk().await {
                let at = Instant::now();
                buffer.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buffer.find("\n\n") {
                    let frame: String = buffer.drain(..end + 2).collect();
                    if frame.contains(": subscribed") {
                        ready.add_permits(1);
                    }
                    if let Some(id) = frame.lines().find_map(|l| l.strip_prefix("id: "))
                        && let Ok(seq) = id.trim().parse()
                    {
                        received.lock().await.push((seq, at));
                    }
                }
            }
        });
    }
    let _ = tokio::time::timeout(
        Duration::from_secs(60),
        ready.acquire_many(subscribers as u32),
    )
    .await?;
    println!("subscribers connected: {subscribers}");
    let principal = t.services.authenticate(&t.token).await?;
    let head = t
        .services
        .list_activity(
            &principal,
            &t.workspace.to_string(),
            control_plane::service::PageRequest::parse(Some(1), None).map_err(|e| e.reason)?,
        )
        .await?
        .items
        .first()
        .and_then(|e| e.sequence)
        .unwrap_or(0);
    let mut sent = Vec::with_capacity(events);
    for i in 0..events {
        let started = Instant::now();
        let response = client
            .post(format!(
                "{server}/v1/workspaces/{}/runner-commands",
                t.workspace
            ))
            .bearer_auth(&t.token)
            .json(&serde_json::json!({ "poolId": t.pool, "command": "echo" }))
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(format!("publish failed: {}", response.status()).into());
        }
        sent.push((head + i as i64 + 1, started));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let received = received.lock().await;
    let mut latencies: Vec<Duration> = received
        .iter()
        .filter_map(|(seq, at)| {
            sent.iter()
                .find(|(s, _)| s == seq)
                .map(|(_, started)| at.saturating_duration_since(*started))
        })
        .collect();
    latencies.sort();
    println!(
        "deliveries: {} of {} expected; publish-to-receive p50 {:?} p99 {:?} max {:?}",
        latencies.len(),
        subscribers * events,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default()
    );
    Ok(())
}

async fn signed(server: &str, conns: usize, secs: u64) -> Res<()> {
    let t = setup().await?;
    let cid = CorrelationId::generate();
    let runner = t
        .services
        .register_runner(
            t.pool,
            "load",
            None,
            None,
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await?;
    let private = runner.private_key.ok_or("no private key")?;
    let principal = t.services.authenticate(&t.token).await?;
    // Enough fresh deliveries for the run (each takes one report), inserted in bulk: set-up,
    // not what is measured.
    let wanted = (secs as i64) * 5000;
    println!("creating {wanted} deliveries...");
    // The service layer hides its pool; set-up opens one of its own on the same database.
    let pool = sqlx::PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
    let ids: Vec<(uuid::Uuid,)> = sqlx::query_as(
        "WITH c AS (
             INSERT INTO runner_commands (id, workspace_id, pool_id, command, args,
                 timeout_seconds, status, submitted_by, created_at, updated_at, deadline_at)
             SELECT gen_random_uuid(), $1, $2, 'echo', '[]', 3600, 'queued', $3, now(), now(),
                    now() + interval '1 hour'
             FROM generate_series(1, $4) RETURNING id
         )
         INSERT INTO webhook_deliveries (id, command_id, status, created_at, updated_at)
         SELECT gen_random_uuid(), id, 'pending', now(), now() FROM c RETURNING id",
    )
    .bind(t.workspace)
    .bind(t.pool)
    .bind(principal.user_id)
    .bind(wanted)
    .fetch_all(&pool)
    .await?;
    let deliveries: Arc<Mutex<Vec<uuid::Uuid>>> =
        Arc::new(Mutex::new(ids.into_iter().map(|(id,)| id).collect()));
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(secs);
    if std::env::var_os("OPS_LOAD_ANSWERED").is_some() {
        // The drill starts its other load and its timer at this line.
        println!("sending reports for {secs} s");
    }
    let ok = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let endings = Arc::new(Endings::default());
    let mut workers = Vec::new();
    let started = Instant::now();
    for _ in 0..conns {
        let (client, deliveries, ok, failed, endings) = (
            client.clone(),
            deliveries.clone(),
            ok.clone(),
            failed.clone(),
            endings.clone(),
        );
        let server = server.to_owned();
        let (runner_id, key_id) = (runner.runner.id, runner.key_id);
        workers.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let Some(delivery) = deliveries.lock().await.pop() else {
                    return;
                };
                let path = format!("/v1/runner/webhook-deliveries/{delivery}/status");
                let body = br#"{"status":"received"}"#;
                let nonce = uuid::Uuid::new_v4().simple().to_string();
                let headers = sign_request(
                    &private,
                    runner_id,
                    key_id,
                    "POST",
                    &path,
                    body,
                    chrono::Utc::now().timestamp(),
                    &nonce,
                );
                let mut request = client
                    .post(format!("{server}{path}"))
                    .header("content-type", "application/json")
                    .body(body.to_vec());
                for (name, value) in headers.pairs() {
                    request = request.header(name, value);
                }
                let at = chrono::Utc::now().timestamp_millis();
                let sent = request.send().await;
                endings.record(delivery, at, &sent);
                match sent {
                    Ok(r) if r.status().is_success() => {
                        ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    }
                    _ => failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                };
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let ok = ok.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "signed reports: {ok} ok, {} failed in {elapsed:.1} s = {:.0} req/s",
        failed.load(std::sync::atomic::Ordering::Relaxed),
        ok as f64 / elapsed
    );
    if let Ok(file) = std::env::var("OPS_LOAD_ANSWERED") {
        endings.write(&file)?;
    }
    // What the signature alone costs: header-to-verdict work, in process.
    let (secret, public) = control_plane::domain::generate_keypair();
    let key = ed25519_dalek::VerifyingKey::from_bytes(&public)?;
    let id = uuid::Uuid::new_v4();
    let n = 20_000;
    let begin = Instant::now();
    for i in 0..n {
        let h = sign_request(
            &secret,
            id,
            id,
            "POST",
            "/p",
            b"{}",
            i,
            "nonce-0123456789ab",
        );
        std::hint::black_box(&h);
    }
    let sign_cost = begin.elapsed() / n as u32;
    let h = sign_request(
        &secret,
        id,
        id,
        "POST",
        "/p",
        b"{}",
        1,
        "nonce-0123456789ab",
    );
    let parsed = control_plane::domain::RunnerSignature::parse(|name| {
        h.pairs()
            .into_iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    })?;
    let message = control_plane::domain::signing_message(
        "POST",
        "/p",
        1,
        "nonce-0123456789ab",
        id,
        id,
        &sha2_digest(b"{}"),
    );
    let signature = ed25519_dalek::Signature::from_bytes(&parsed.signature);
    let begin = Instant::now();
    for _ in 0..n {
        std::hint::black_box(key.verify_strict(message.as_bytes(), &signature)).ok();
    }
    println!(
        "one verification (verify_strict): {:?}; one signing (client side): {sign_cost:?}",
        begin.elapsed() / n as u32
    );
    Ok(())
}

/// How each report ended; written out only when OPS_LOAD_ANSWERED names a file.
#[derive(Default)]
struct Endings {
    answered: std::sync::Mutex<Vec<uuid::Uuid>>,
    /// Answered, but not 2xx.
    refused: std::sync::atomic::AtomicU64,
    /// When each report was sent that went on an open connection which closed before the
    /// answer came (in flight at a kill), in Unix milliseconds.
    cut_off: std::sync::Mutex<Vec<i64>>,
    /// No connection (the server was down).
    unreachable: std::sync::atomic::AtomicU64,
}

impl Endings {
    fn record(&self, delivery: uuid::Uuid, at: i64, sent: &reqwest::Result<reqwest::Response>) {
        use std::sync::atomic::Ordering::Relaxed;
        match sent {
            Ok(r) if r.status().is_success() => self
                .answered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(delivery),
            Ok(_) => {
                self.refused.fetch_add(1, Relaxed);
            }
            Err(e) if e.is_connect() => {
                self.unreachable.fetch_add(1, Relaxed);
            }
            Err(_) => self
                .cut_off
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(at),
        }
    }

    fn write(&self, file: &str) -> Res<()> {
        use std::sync::atomic::Ordering::Relaxed;
        let answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = String::with_capacity(answered.len() * 37);
        for id in answered.iter() {
            text.push_str(&id.to_string());
            text.push('\n');
        }
        std::fs::write(file, text)?;
        let cut_off = self.cut_off.lock().unwrap_or_else(|e| e.into_inner());
        let times: String = cut_off.iter().map(|at| format!("{at}\n")).collect();
        std::fs::write(format!("{file}.cut-off"), times)?;
        println!(
            "reports answered 2xx: {} (ids in {file}); answered otherwise: {}; cut off in flight: {}; no connection: {}",
            answered.len(),
            self.refused.load(Relaxed),
            cut_off.len(),
            self.unreachable.load(Relaxed)
        );
        Ok(())
    }
}

fn sha2_digest(body: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(body).into()
}

#[tokio::main]
async fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let server = std::env::var("SERVER").unwrap_or_else(|_| "http://127.0.0.1:18080".into());
    let num =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    match args.get(1).map(String::as_str) {
        Some("fanout") => fanout(&server, num(2, 1000), num(3, 200)).await,
        Some("signed") => signed(&server, num(2, 32), num(3, 15) as u64).await,
        _ => Err("usage: ops_load fanout N EVENTS | ops_load signed CONNS SECS".into()),
    }
}
