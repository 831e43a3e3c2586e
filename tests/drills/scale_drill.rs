//! The scale drill: three server processes on a Postgres primary with a streaming replica and
//! a three-master Redis Cluster, many workspaces, a mixed load (keyed commands delivered to
//! each workspace's runner, `cpctl runners serve` in this process, which reports them through
//! the signed status route; keyed token issuance, activity reads, open audit streams), and
//! three faults during
//! it: a Redis master killed and restarted without its keys (or, where `scale.sh` gave each
//! master a replica, restarted after the replica took over), the replica stopped, a server
//! SIGKILLed. Checked against [`criteria`]; exits non-zero naming each criterion that broke.
//! `tests/drills/scale.sh` starts the cluster and the Postgres pair and runs this.
//!
//! Env: SERVER_BIN, DATABASE_URL (primary), CP_READ_DATABASE_URL (replica), REDIS_URL (cluster
//! seeds), CP_TOKEN_HASH_KEY, CP_IDEMPOTENCY_KEYS, CP_KEY_ENCRYPTION_KEY (the same for every
//! process), DRILL_DIR (logs, and the scripts `redis-kill.sh`, `redis-start.sh`,
//! `replica-stop.sh` the faults run), PORT (first of three), DRILL_SECS (default 60),
//! DRILL_WORKSPACES (default 1000), DRILL_STREAMS (default 200), DRILL_INJECT=lose-event (one
//! stream forgets an event before the check: the drill must fail).

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, ExpiresInDays};
use control_plane::service::{BootstrapInput, Services};
use control_plane::startup::open_services;
use cpctl::runner::{RunnerConfig, RunnerServer};
use serde_json::{Value, json};
use uuid::Uuid;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How long a keyed request is retried (same key, same body) before it counts as unanswered.
const PATIENCE: Duration = Duration::from_secs(90);
/// After the load: how long streams and deliveries have to catch up.
const GRACE: Duration = Duration::from_secs(30);

fn criteria() -> [&'static str; 6] {
    [
        "0 double executions: no idempotency key has more than one command or token, and each is the one its 2xx answers named",
        "every keyed request answered 2xx in the end (same key and body retried on any live server, within 90 s)",
        "0 lost and 0 repeated events: every stream, resumed with Last-Event-ID after its server died, received each sequence of its workspace from its start to the head exactly once, in order",
        "every accepted command delivered to its runner (`cpctl runners serve`) and reported `succeeded` by it through the signed status route (within 30 s of the load's end)",
        "activity reads: every answer from a live server is 200, none timed out (the replica stopped does not show)",
        "the faults bit: keyed requests got 503 while the Redis master was down, the replica answered reads (served, or behind the reader) and they moved to the primary when it stopped, streams resumed on another server after the kill",
    ]
}

struct Tenant {
    organisation: Uuid,
    workspace: Uuid,
    token: String,
    pool: Uuid,
}

fn start_server(port: u16, log: &str) -> Res<Child> {
    let bin = std::env::var("SERVER_BIN")?;
    let log = std::fs::File::create(log)?;
    Ok(Command::new(bin)
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--log-format",
            "json",
        ])
        // Budgets would only add 429s; this drill is about faults past one machine.
        .args(["--rate-limit", "off", "--user-rate-limit", "off"])
        .args(["--org-rate-limit", "off", "--issue-rate-limit", "off"])
        .args([
            "--runner-rate-limit",
            "off",
            "--runner-address-rate-limit",
            "off",
        ])
        .args(["--max-active-tokens-per-user", "1000000"])
        // Every client here is 127.0.0.1, as behind a load balancer: 1,000 runners keeping a
        // connection each to the server they report to are past the default 256 per address.
        .args(["--max-connections-per-address", "off"])
        .args(["--delivery-http-hosts", "localhost,127.0.0.1,::1"])
        // Three servers, Postgres twice, three Redis nodes and the load share this machine's
        // cores: the built-in authorizer must not fail closed on a scheduling stall (the
        // deadline is for hostile policies; the abuse drill measures it).
        .args(["--policy-deadline-ms", "500"])
        // The JSON log (stdout) beside the panic hook's lines (stderr): scale.sh reads both.
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?)
}

/// Outcomes by request kind: answers by status (or `connection`), and latencies of 2xx.
#[derive(Default)]
struct Tally {
    statuses: Mutex<BTreeMap<(&'static str, String), usize>>,
    latencies: Mutex<HashMap<&'static str, Vec<f64>>>,
}

impl Tally {
    fn note(&self, kind: &'static str, status: String, took: Duration, ok: bool) {
        *self
            .statuses
            .lock()
            .unwrap()
            .entry((kind, status))
            .or_default() += 1;
        if ok {
            self.latencies
                .lock()
                .unwrap()
                .entry(kind)
                .or_default()
                .push(took.as_secs_f64() * 1000.0);
        }
    }
}

struct Drill {
    client: reqwest::Client,
    servers: Vec<String>,
    /// Index of the killed server, once killed.
    dead: Mutex<Option<usize>>,
    tally: Tally,
    stop: AtomicBool,
    /// While the Redis master is down: keyed 503s counted in this window.
    redis_down: AtomicBool,
    redis_503: AtomicUsize,
    unanswered: AtomicUsize,
    /// Keys answered 409 `idempotency_in_progress`, by what an earlier attempt of the key met
    /// (`InProgressCause`): a claim held by the killed server, or one made during the failover.
    in_progress: Mutex<BTreeMap<InProgressCause, (usize, usize)>>,
    /// Idempotency key -> the id every 2xx answer named (commands and tokens).
    answered: Mutex<HashMap<String, (String, bool)>>,
    accepted_deliveries: Mutex<Vec<String>>,
}

/// What came before a key's first 409: its claim's likely holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum InProgressCause {
    /// An attempt ended in a connection error: in flight on the SIGKILLed server.
    KilledServer,
    /// An attempt was answered 503 while the Redis master was down.
    Failover,
    /// Neither: a claim held by a live server (a slow attempt), or an unknown cause.
    Other,
}

impl InProgressCause {
    fn as_str(self) -> &'static str {
        match self {
            Self::KilledServer => "in flight on the killed server",
            Self::Failover => "after a 503 in the Redis failover",
            Self::Other => "neither",
        }
    }
}

impl Drill {
    fn live(&self, n: usize) -> String {
        let dead = *self.dead.lock().unwrap();
        let mut i = n % self.servers.len();
        if Some(i) == dead {
            i = (i + 1) % self.servers.len();
        }
        self.servers[i].clone()
    }

    /// Sends a keyed POST until a 2xx, on any live server; returns its body.
    async fn keyed(
        &self,
        kind: &'static str,
        path: &str,
        token: &str,
        body: &Value,
    ) -> Option<Value> {
        let key = Uuid::new_v4().simple().to_string();
        let started = Instant::now();
        let mut attempt = rand::random::<u32>() as usize;
        let (mut cause, mut conflicts) = (InProgressCause::Other, 0);
        while started.elapsed() < PATIENCE {
            attempt += 1;
            let server = self.live(attempt);
            let sent = Instant::now();
            let response = self
                .client
                .post(format!("{server}{path}"))
                .bearer_auth(token)
                .header("idempotency-key", &key)
                .json(body)
                .send()
                .await;
            let wait = match response {
                Ok(r) if r.status().is_success() => {
                    self.note_in_progress(cause, conflicts);
                    self.tally
                        .note(kind, r.status().as_u16().to_string(), sent.elapsed(), true);
                    let body: Value = r.json().await.ok()?;
                    return Some(json!({"key": key, "body": body}));
                }
                Ok(r) => {
                    let status = r.status().as_u16();
                    if status == 503 && self.redis_down.load(Ordering::Relaxed) {
                        self.redis_503.fetch_add(1, Ordering::Relaxed);
                        if conflicts == 0 && cause == InProgressCause::Other {
                            cause = InProgressCause::Failover;
                        }
                    }
                    if status == 409 {
                        conflicts += 1;
                    }
                    self.tally
                        .note(kind, status.to_string(), sent.elapsed(), false);
                    r.headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                        .map_or(Duration::from_millis(200), Duration::from_secs)
                }
                Err(_) => {
                    if conflicts == 0 {
                        cause = InProgressCause::KilledServer;
                    }
                    self.tally
                        .note(kind, "connection".into(), sent.elapsed(), false);
                    Duration::from_millis(100)
                }
            };
            tokio::time::sleep(wait.min(Duration::from_secs(2))).await;
        }
        self.note_in_progress(cause, conflicts);
        self.unanswered.fetch_add(1, Ordering::Relaxed);
        None
    }

    fn note_in_progress(&self, cause: InProgressCause, conflicts: usize) {
        if conflicts > 0 {
            let mut counts = self.in_progress.lock().unwrap();
            let (keys, answers) = counts.entry(cause).or_default();
            *keys += 1;
            *answers += conflicts;
        }
    }

    async fn command(&self, t: &Tenant) {
        let name = format!("scale-{}", Uuid::new_v4().simple());
        let body = json!({"poolId": t.pool, "command": name, "args": []});
        let path = format!("/v1/workspaces/{}/runner-commands", t.workspace);
        if let Some(answer) = self.keyed("command", &path, &t.token, &body).await {
            let id = answer["body"]["command"]["id"].as_str().unwrap_or_default();
            let delivery = answer["body"]["command"]["deliveryId"].as_str();
            self.answered
                .lock()
                .unwrap()
                .insert(name, (id.to_owned(), true));
            if let Some(delivery) = delivery {
                self.accepted_deliveries
                    .lock()
                    .unwrap()
                    .push(delivery.to_owned());
            }
        }
    }

    async fn issue(&self, t: &Tenant) {
        let name = format!("scale-{}", Uuid::new_v4().simple());
        let body = json!({"name": name, "scopes": ["activity:read"],
            "organisationId": t.organisation, "workspaceIds": [t.workspace]});
        if let Some(answer) = self
            .keyed("issue", "/v1/personal-access-tokens", &t.token, &body)
            .await
        {
            let id = answer["body"]["credential"]["id"]
                .as_str()
                .unwrap_or_default();
            self.answered
                .lock()
                .unwrap()
                .insert(name, (id.to_owned(), false));
        }
    }

    /// Reads a first page (the primary's) and the page below it (the replica's while it
    /// serves), 10 events each.
    async fn read(&self, t: &Tenant, n: usize) {
        let server = self.live(n);
        let first = format!("{server}/v1/workspaces/{}/activity?limit=10", t.workspace);
        let Some(body) = self.get("activity", &first, &t.token).await else {
            return;
        };
        if let Some(cursor) = body["nextCursor"].as_str() {
            let next = format!("{first}&cursor={cursor}");
            self.get("activity", &next, &t.token).await;
        }
    }

    async fn get(&self, kind: &'static str, url: &str, token: &str) -> Option<Value> {
        let sent = Instant::now();
        match self.client.get(url).bearer_auth(token).send().await {
            Ok(r) => {
                let ok = r.status().is_success();
                let status = r.status().as_u16().to_string();
                let body = r.json::<Value>().await.ok();
                self.tally.note(kind, status, sent.elapsed(), ok);
                body.filter(|_| ok)
            }
            // A refused connection is the killed server's; a timeout is a live server's.
            Err(e) => {
                let what = if e.is_timeout() {
                    "timeout"
                } else {
                    "connection"
                };
                self.tally.note(kind, what.into(), sent.elapsed(), false);
                None
            }
        }
    }
}

/// One open stream: the sequences it received, and how often it resumed elsewhere.
#[derive(Default)]
struct StreamLog {
    start: i64,
    seen: Vec<i64>,
    resumed: usize,
}

/// Follows a workspace's audit stream from `start`, resuming on the next live server with
/// `Last-Event-ID` whenever the connection ends, until the drill's `done` flag.
async fn follow(
    drill: Arc<Drill>,
    t: Arc<Tenant>,
    n: usize,
    log: Arc<Mutex<StreamLog>>,
    done: Arc<AtomicBool>,
) {
    let mut attempt = n;
    let mut connected_before = false;
    while !done.load(Ordering::Relaxed) {
        let last = {
            let log = log.lock().unwrap();
            log.seen.last().copied().unwrap_or(log.start)
        };
        let server = drill.live(attempt);
        let response = drill
            .client
            .get(format!(
                "{server}/v1/workspaces/{}/audit/stream",
                t.workspace
            ))
            .bearer_auth(&t.token)
            .header("last-event-id", last.to_string())
            .timeout(Duration::from_secs(3600))
            .send()
            .await;
        let mut response = match response {
            Ok(r) if r.status().is_success() => r,
            _ => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if connected_before {
            log.lock().unwrap().resumed += 1;
        }
        connected_before = true;
        let mut buffer = String::new();
        loop {
            let chunk = tokio::select! {
                chunk = response.chunk() => chunk,
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    if done.load(Ordering::Relaxed) { return; }
                    continue;
                }
            };
            let Ok(Some(chunk)) = chunk else { break };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let frame: String = buffer.drain(..end + 2).collect();
                if let Some(id) = frame.lines().find_map(|l| l.strip_prefix("id:"))
                    && let Ok(seq) = id.trim().parse::<i64>()
                {
                    log.lock().unwrap().seen.push(seq);
                }
            }
        }
        // The connection ended (its server died, or the stream reached its end): resume.
        attempt += 1;
    }
}

fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn run_script(dir: &str, name: &str) -> Res<()> {
    let status = Command::new("sh").arg(format!("{dir}/{name}")).status()?;
    if !status.success() {
        return Err(format!("{name} failed: {status}").into());
    }
    Ok(())
}

/// N tenants, each with a pool and a runner served in this process, which reports to one of
/// `report_to` (not to the server the drill kills: a real runner behind a load balancer would
/// be sent elsewhere).
async fn tenants(services: &Services, n: usize, report_to: &[String]) -> Res<Vec<Arc<Tenant>>> {
    let mut all = Vec::with_capacity(n);
    let run = Uuid::new_v4().simple().to_string();
    let run = run.as_str();
    for chunk in (0..n).collect::<Vec<_>>().chunks(16) {
        let made = futures_util::future::join_all(chunk.iter().map(|i| async move {
            let cid = CorrelationId::generate();
            let boot = services
                .bootstrap(
                    BootstrapInput {
                        organisation: format!("scale-{run}-{i}"),
                        workspace: "main".into(),
                        admin_email: format!("scale-{i}-{run}@drill.test"),
                        expires_in_days: ExpiresInDays::default(),
                    },
                    &cid,
                )
                .await?;
            let pool = services
                .create_pool(
                    boot.workspace.id,
                    "scale",
                    &control_plane::storage::WriteContext::admin(&cid),
                )
                .await?;
            let registered = services
                .register_runner(
                    pool.id,
                    "scale",
                    None,
                    None,
                    &control_plane::storage::WriteContext::admin(&cid),
                )
                .await?;
            let runner = RunnerServer::bind(RunnerConfig {
                listen: "127.0.0.1:0".into(),
                control_plane: report_to[i % report_to.len()].clone(),
                runner_id: registered.runner.id,
                key_id: registered.key_id,
                private_key: registered.private_key.ok_or("no private key")?,
                webhook_secret: Some(registered.webhook_secret.clone()),
                pinned_keys: vec![],
                dedup_capacity: 1_000,
            })
            .await
            .map_err(|e| format!("{e:#}"))?;
            let url = format!("http://127.0.0.1:{}/", runner.port());
            services
                .set_runner_url(
                    registered.runner.id,
                    Some(&url),
                    &control_plane::storage::WriteContext::admin(&cid),
                )
                .await?;
            tokio::spawn(runner.run());
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Arc::new(Tenant {
                organisation: boot.organisation.id,
                workspace: boot.workspace.id,
                token: boot.credential.secret.expose().to_owned(),
                pool: pool.id,
            }))
        }))
        .await;
        for tenant in made {
            all.push(tenant?);
        }
    }
    Ok(all)
}

/// Activity and replay reads `servers` counted under `outcomes` of `replica_reads_total`.
async fn replica_reads(client: &reqwest::Client, servers: &[String], outcomes: &[&str]) -> f64 {
    let series: Vec<String> = outcomes
        .iter()
        .map(|o| format!("replica_reads_total{{outcome=\"{o}\"}} "))
        .collect();
    let mut sum = 0.0;
    for server in servers {
        let Ok(r) = client.get(format!("{server}/metrics")).send().await else {
            continue;
        };
        let text = r.text().await.unwrap_or_default();
        sum += text
            .lines()
            .filter_map(|l| series.iter().find_map(|s| l.strip_prefix(s.as_str())))
            .filter_map(|n| n.trim().parse::<f64>().ok())
            .sum::<f64>();
    }
    sum
}

/// Accepted commands not yet reported `succeeded` by their runner, by status (`missing`: a
/// delivery id an answer named that is not in the records, or is not an id at all).
async fn unfinished(drill: &Drill, records: &sqlx::PgPool) -> Res<BTreeMap<String, i64>> {
    let accepted = drill.accepted_deliveries.lock().unwrap().clone();
    let deliveries: Vec<Uuid> = accepted.iter().filter_map(|d| d.parse().ok()).collect();
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT coalesce(c.status, 'missing'), count(*) FROM unnest($1::uuid[]) AS a(id)
         LEFT JOIN webhook_deliveries d ON d.id = a.id
         LEFT JOIN runner_commands c ON c.id = d.command_id
         WHERE c.status IS DISTINCT FROM 'succeeded' GROUP BY 1",
    )
    .bind(&deliveries)
    .fetch_all(records)
    .await?;
    let mut by_status: BTreeMap<String, i64> = rows.into_iter().collect();
    let unparsed = (accepted.len() - deliveries.len()) as i64;
    if unparsed > 0 {
        *by_status.entry("missing".into()).or_default() += unparsed;
    }
    Ok(by_status)
}

#[tokio::main]
async fn main() -> Res<()> {
    let secs = env_u64("DRILL_SECS", 60);
    let workspaces = env_u64("DRILL_WORKSPACES", 1000) as usize;
    let streams = (env_u64("DRILL_STREAMS", 200) as usize).min(workspaces);
    let port = env_u64("PORT", 18120) as u16;
    let dir = std::env::var("DRILL_DIR")?;
    println!(
        "# scale drill: 3 servers, Redis Cluster, Postgres primary + replica, {workspaces} \
         workspaces, {streams} streams, {secs} s of load\n\ncriteria:"
    );
    for (n, criterion) in criteria().iter().enumerate() {
        println!("  {}. {criterion}", n + 1);
    }
    println!();

    let database_url = std::env::var("DATABASE_URL")?;
    let mut config = ServerConfig::for_database(database_url.clone());
    config.token_hash_key = std::env::var("CP_TOKEN_HASH_KEY").ok();
    config.key_encryption_key = std::env::var("CP_KEY_ENCRYPTION_KEY").ok();
    config.delivery_http_hosts = Some(control_plane::domain::EgressPolicy::LOOPBACK.into());
    config.max_active_tokens_per_user = 1_000_000;
    let services = open_services(&config).await?;
    let records = sqlx::PgPool::connect(&database_url).await?;
    let set_up = Instant::now();
    let report_to: Vec<String> = (0..2)
        .map(|i| format!("http://127.0.0.1:{}", port + i))
        .collect();
    let tenants = tenants(&services, workspaces, &report_to).await?;
    println!(
        "set up {workspaces} workspaces in {:.1} s",
        set_up.elapsed().as_secs_f64()
    );

    let mut children: Vec<Option<Child>> = Vec::new();
    let mut servers = Vec::new();
    for i in 0..3u16 {
        children.push(Some(start_server(
            port + i,
            &format!("{dir}/server-{i}.log"),
        )?));
        servers.push(format!("http://127.0.0.1:{}", port + i));
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(512)
        .build()?;
    for server in &servers {
        let mut ready = false;
        for _ in 0..600 {
            if let Ok(r) = client.get(format!("{server}/readyz")).send().await
                && r.status().is_success()
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !ready {
            return Err(format!("{server} did not become ready").into());
        }
    }
    let drill = Arc::new(Drill {
        client,
        servers: servers.clone(),
        dead: Mutex::new(None),
        tally: Tally::default(),
        stop: AtomicBool::new(false),
        redis_down: AtomicBool::new(false),
        redis_503: AtomicUsize::new(0),
        unanswered: AtomicUsize::new(0),
        in_progress: Mutex::default(),
        answered: Mutex::new(HashMap::new()),
        accepted_deliveries: Mutex::new(Vec::new()),
    });

    // The streams, each from its workspace's head now.
    let done = Arc::new(AtomicBool::new(false));
    let mut logs = Vec::new();
    let mut followers = Vec::new();
    for (n, t) in tenants.iter().take(streams).enumerate() {
        let head: Option<i64> =
            sqlx::query_scalar("SELECT max(seq) FROM audit_events WHERE workspace_id = $1")
                .bind(t.workspace)
                .fetch_one(&records)
                .await?;
        let log = Arc::new(Mutex::new(StreamLog {
            start: head.unwrap_or(0),
            ..StreamLog::default()
        }));
        logs.push((t.workspace, log.clone()));
        followers.push(tokio::spawn(follow(
            drill.clone(),
            t.clone(),
            n,
            log,
            done.clone(),
        )));
    }

    // The load: workers until the clock runs out, each request's tenant at random.
    let load_started = Instant::now();
    let mut workers = Vec::new();
    for (kind, count) in [("command", 6usize), ("issue", 2), ("activity", 6)] {
        for w in 0..count {
            let (drill, tenants) = (drill.clone(), tenants.clone());
            workers.push(tokio::spawn(async move {
                let mut n = w;
                while !drill.stop.load(Ordering::Relaxed) {
                    n += 1;
                    let t = &tenants[rand::random::<u32>() as usize % tenants.len()];
                    match kind {
                        "command" => drill.command(t).await,
                        "issue" => drill.issue(t).await,
                        _ => drill.read(t, n).await,
                    }
                }
            }));
        }
    }

    // The faults, at fixed shares of the load.
    let at = |share: f64| load_started + Duration::from_secs_f64(secs as f64 * share);
    tokio::time::sleep_until(at(0.2).into()).await;
    println!(
        "fault: a Redis master killed at {:.1} s",
        load_started.elapsed().as_secs_f64()
    );
    drill.redis_down.store(true, Ordering::Relaxed);
    run_script(&dir, "redis-kill.sh")?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    run_script(&dir, "redis-start.sh")?;
    println!(
        "fault: the Redis master restarted at {:.1} s",
        load_started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    drill.redis_down.store(false, Ordering::Relaxed);
    tokio::time::sleep_until(at(0.45).into()).await;
    // Asked and answering: served, or found behind the reader (a loaded machine replays late).
    let served_before = replica_reads(&drill.client, &servers, &["served", "behind"]).await;
    let mut by_outcome = Vec::new();
    for outcome in ["served", "behind", "skipped", "failed"] {
        let n = replica_reads(&drill.client, &servers, &[outcome]).await;
        by_outcome.push(format!("{outcome} {n}"));
    }
    println!(
        "replica reads before it stopped: {} (pages below a cursor and replays)",
        by_outcome.join(", ")
    );
    let primary_reads_before =
        replica_reads(&drill.client, &servers[..2], &["skipped", "failed"]).await;
    println!(
        "fault: the replica stopped at {:.1} s",
        load_started.elapsed().as_secs_f64()
    );
    run_script(&dir, "replica-stop.sh")?;
    tokio::time::sleep_until(at(0.65).into()).await;
    println!(
        "fault: server 3 SIGKILLed at {:.1} s",
        load_started.elapsed().as_secs_f64()
    );
    *drill.dead.lock().unwrap() = Some(2);
    if let Some(mut child) = children[2].take() {
        let _ = child.kill();
        let _ = child.wait();
    }
    tokio::time::sleep_until(at(1.0).into()).await;
    drill.stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = worker.await;
    }
    // A key whose claim the killed server held answers 409 until its lease ends (30 s): the
    // workers' last retries can outlast the load.
    let drained_secs = load_started.elapsed().as_secs_f64();
    let load_secs = secs as f64;
    let primary_reads_after =
        replica_reads(&drill.client, &servers[..2], &["skipped", "failed"]).await;

    // Catching up: every stream to its workspace's head, every delivery to the runner.
    let grace = Instant::now();
    let mut heads = HashMap::new();
    loop {
        heads.clear();
        let mut behind = 0;
        for (workspace, log) in &logs {
            let head: Option<i64> =
                sqlx::query_scalar("SELECT max(seq) FROM audit_events WHERE workspace_id = $1")
                    .bind(workspace)
                    .fetch_one(&records)
                    .await?;
            let head = head.unwrap_or(0);
            heads.insert(*workspace, head);
            let log = log.lock().unwrap();
            if log.seen.last().copied().unwrap_or(log.start) < head {
                behind += 1;
            }
        }
        let unfinished = unfinished(&drill, &records).await?;
        if (behind == 0 && unfinished.is_empty()) || grace.elapsed() > GRACE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    done.store(true, Ordering::Relaxed);
    for follower in followers {
        let _ = follower.await;
    }

    // The checks.
    let mut failures: Vec<(usize, String)> = Vec::new();
    let answered = drill.answered.lock().unwrap().clone();
    let commands: Vec<(String, Uuid)> =
        sqlx::query_as("SELECT command, id FROM runner_commands WHERE command LIKE 'scale-%'")
            .fetch_all(&records)
            .await?;
    let tokens: Vec<(String, Uuid)> =
        sqlx::query_as("SELECT name, id FROM tokens WHERE name LIKE 'scale-%'")
            .fetch_all(&records)
            .await?;
    let mut by_name: HashMap<String, Vec<String>> = HashMap::new();
    for (name, id) in commands.iter().chain(&tokens) {
        by_name
            .entry(name.clone())
            .or_default()
            .push(id.to_string());
    }
    let doubles = by_name.values().filter(|ids| ids.len() > 1).count();
    let mismatched = answered
        .iter()
        .filter(|(name, (id, _))| {
            by_name
                .get(*name)
                .is_none_or(|ids| ids != &vec![id.clone()])
        })
        .count();
    if doubles > 0 || mismatched > 0 {
        failures.push((0, format!("{doubles} keys with two or more records, {mismatched} answers naming another record")));
    }
    let unanswered = drill.unanswered.load(Ordering::Relaxed);
    if unanswered > 0 {
        failures.push((1, format!("{unanswered} keyed requests never answered 2xx")));
    }
    if std::env::var("DRILL_INJECT").is_ok_and(|v| v == "lose-event")
        && let Some((_, log)) = logs
            .iter()
            .find(|(_, l)| !l.lock().unwrap().seen.is_empty())
    {
        // To see the check fail: one stream forgets the last event it received.
        log.lock().unwrap().seen.pop();
    }
    let (mut lost, mut repeated, mut resumed, mut received) = (0i64, 0usize, 0usize, 0usize);
    for (workspace, log) in &logs {
        let log = log.lock().unwrap();
        let head = heads.get(workspace).copied().unwrap_or(0);
        let mut expected = log.start + 1;
        for &seq in &log.seen {
            if seq < expected {
                repeated += 1;
            } else {
                lost += seq - expected;
                expected = seq + 1;
            }
        }
        lost += (head + 1 - expected).max(0);
        resumed += log.resumed;
        received += log.seen.len();
    }
    if lost > 0 || repeated > 0 {
        failures.push((2, format!("{lost} events lost, {repeated} repeated")));
    }
    let unfinished = unfinished(&drill, &records).await?;
    let not_succeeded: i64 = unfinished.values().sum();
    // A delivery sent more than once (a retry after a timeout or a server's death): the runner
    // recognises its webhook-id and runs it once.
    let resent: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(attempts - 1), 0)::bigint FROM webhook_deliveries WHERE attempts > 1",
    )
    .fetch_one(&records)
    .await?;
    let accepted = drill.accepted_deliveries.lock().unwrap().len();
    if not_succeeded > 0 || accepted == 0 {
        failures.push((
            3,
            format!("{not_succeeded} of {accepted} accepted commands not reported succeeded, by status: {unfinished:?}"),
        ));
    }
    let statuses = drill.tally.statuses.lock().unwrap().clone();
    let bad_reads: usize = statuses
        .iter()
        .filter(|((kind, status), _)| {
            *kind == "activity" && status != "200" && status != "connection"
        })
        .map(|(_, n)| n)
        .sum();
    if bad_reads > 0 {
        failures.push((
            4,
            format!("{bad_reads} activity reads answered other than 200"),
        ));
    }
    let redis_503 = drill.redis_503.load(Ordering::Relaxed);
    let moved = primary_reads_after - primary_reads_before;
    if redis_503 == 0 || served_before <= 0.0 || moved <= 0.0 || resumed == 0 {
        failures.push((5, format!(
            "keyed 503s during the Redis outage: {redis_503}; reads moved to the primary: {moved}; streams resumed: {resumed}"
        )));
    }

    println!(
        "\n## figures ({load_secs:.0} s of load; its last keyed request answered at {drained_secs:.1} s)\n"
    );
    println!("| kind | answers | 2xx/s of load | p50 ms | p99 ms | answers by status |");
    println!("|---|---|---|---|---|---|");
    let mut latencies = drill.tally.latencies.lock().unwrap().clone();
    for kind in ["command", "issue", "activity"] {
        let by_status: Vec<String> = statuses
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|((_, s), n)| format!("{s}: {n}"))
            .collect();
        let total: usize = statuses
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, n)| n)
            .sum();
        let values = latencies.entry(kind).or_default();
        let ok = values.len();
        println!(
            "| {kind} | {total} | {:.0} | {:.1} | {:.1} | {} |",
            ok as f64 / load_secs,
            quantile(values, 0.5),
            quantile(values, 0.99),
            by_status.join(", ")
        );
    }
    println!(
        "\nstreams: {streams}, events received {received}, resumed after the kill {resumed}, \
         lost {lost}, repeated {repeated}"
    );
    println!(
        "keys: {} answered, {doubles} double executions, {unanswered} unanswered",
        answered.len()
    );
    println!(
        "deliveries: {} accepted, {not_succeeded} not reported succeeded by their runner, {resent} attempts past the first",
        accepted
    );
    let in_progress: Vec<String> = drill
        .in_progress
        .lock()
        .unwrap()
        .iter()
        .map(|(cause, (keys, answers))| {
            format!("{keys} keys {} ({answers} answers)", cause.as_str())
        })
        .collect();
    println!(
        "keys answered 409 in progress, by what an earlier attempt met: {}",
        if in_progress.is_empty() {
            "none".to_owned()
        } else {
            in_progress.join("; ")
        }
    );
    println!(
        "keyed 503s while the Redis master was down: {redis_503}; reads the replica answered \
         before it stopped: {served_before}; reads moved to the primary after: {moved}"
    );

    for child in children.iter_mut().flatten() {
        let _ = child.kill();
        let _ = child.wait();
    }
    if failures.is_empty() {
        println!("\nall criteria met");
        Ok(())
    } else {
        for (n, why) in &failures {
            println!("FAILED criterion {} ({}): {why}", n + 1, criteria()[*n]);
        }
        std::process::exit(1);
    }
}
