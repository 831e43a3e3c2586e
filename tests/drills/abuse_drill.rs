//! Issue #13's abuse drill: each attack runs against a release server for a bounded time while a
//! well-behaved client and a runner of another organisation keep working. For every attack it
//! prints what the attacker got, what the good client and the runner got, the server's 5xx and
//! its RSS before and after. `tests/drills/abuse.sh` starts the server and runs this.
//!
//! Env: DATABASE_URL and CP_TOKEN_HASH_KEY (the server's, for set-up), SERVER (base URL),
//! SERVER_PID (for RSS), REDIS_URL (for Redis memory), DRILL_SECS (per attack, default 10),
//! CP_POLICY_DEADLINE_MS (the server's policy deadline, default 50) and DRILL_POLICY_MARGIN_MS
//! (what a request with the sleeping policy active may take beyond it, default 50).
//!
//! The criteria are printed first; the drill exits 1 with a `FAILED criterion N` line for each
//! one that broke (the third, no panic in the server log, is the script's to check).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, ExpiresInDays, Scopes, TokenName, sign_request};
use control_plane::policy::{PolicyKind, fixtures};
use control_plane::service::{BootstrapInput, IssueTokenInput, Services};
use control_plane::startup::open_services;
use serde_json::{Value, json};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Requests timed with the sleeping policy active.
const SAMPLES: usize = 40;
/// HTTP answers the attacker must get in each attack phase, some of them 429.
const MIN_ANSWERS: u64 = 50;
const CONNECTION_ERROR: &str = "connection error";

/// The drill's criteria, in the words RELIABILITY.md quotes.
fn criteria(deadline_ms: u64, margin_ms: u64) -> [String; 5] {
    [
        "clients served: the good client and the runner get only 2xx in every attack phase; \
         every runner submission counts, and a connection error, a non-2xx or a 2xx without a \
         deliveryId on it is a failure, as is any non-2xx on the signed report"
            .into(),
        "no 5xx: the server answers no 5xx during the whole drill (http_requests_total in \
         /metrics)"
            .into(),
        "no panic: the server log holds no panic (tests/drills/abuse.sh checks it)".into(),
        format!(
            "policy deadline: with the sleeping policy active, each of {SAMPLES} requests ends \
             within the {deadline_ms} ms deadline + a {margin_ms} ms margin and answers 403 \
             `policy_error`; a 429 or any other answer is a failure"
        ),
        format!(
            "attacks ran: in every attack phase the attacker got at least {MIN_ANSWERS} HTTP \
             answers, some of them 429"
        ),
    ]
}

struct Tenant {
    org: uuid::Uuid,
    workspace: uuid::Uuid,
    user: uuid::Uuid,
    token: String,
    pool: uuid::Uuid,
}

async fn tenant(services: &Services, name: &str) -> Res<Tenant> {
    let cid = CorrelationId::generate();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let boot = services
        .bootstrap(
            BootstrapInput {
                organisation: format!("{name}-{suffix}"),
                workspace: "main".into(),
                admin_email: format!("{name}@drill.test"),
                expires_in_days: ExpiresInDays::default(),
            },
            &cid,
        )
        .await?;
    let pool = services
        .create_pool(boot.workspace.id, "drill", &cid)
        .await?;
    Ok(Tenant {
        org: boot.organisation.id,
        workspace: boot.workspace.id,
        user: boot.user.id,
        token: boot.credential.secret.expose().to_owned(),
        pool: pool.id,
    })
}

/// Outcomes of one side of one attack: a status ("200"), a connection error, or an answer that
/// lacks what it must carry ("201 without deliveryId").
#[derive(Default)]
struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    fn add(&self, outcome: impl Into<String>) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(outcome.into())
            .or_default() += 1;
    }

    fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

fn show(tally: &BTreeMap<String, u64>) -> String {
    if tally.is_empty() {
        return "nothing".into();
    }
    tally
        .iter()
        .map(|(outcome, n)| format!("{n}×{outcome}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn status(outcome: &str) -> Option<u16> {
    outcome.parse().ok()
}

/// Something was asked, and every answer was a plain 2xx.
fn all_2xx(tally: &BTreeMap<String, u64>) -> bool {
    !tally.is_empty()
        && tally
            .keys()
            .all(|o| status(o).is_some_and(|s| (200..300).contains(&s)))
}

/// HTTP answers (connection errors left out).
fn answers(tally: &BTreeMap<String, u64>) -> u64 {
    tally
        .iter()
        .filter(|(o, _)| status(o).is_some())
        .map(|(_, n)| n)
        .sum()
}

fn outcome_of(result: reqwest::Result<reqwest::Response>) -> String {
    result.map_or(CONNECTION_ERROR.into(), |r| r.status().as_u16().to_string())
}

struct Drill {
    server: String,
    /// The attacker's connections, from 127.0.0.1 (the runner's address too).
    client: reqwest::Client,
    /// The good client's, from 127.0.0.3: its own connections, so a connection the server closed
    /// on the attacker is never reused for it.
    good_client: reqwest::Client,
    /// The runner's, from 127.0.0.1 like the attacker, but on connections of its own.
    runner_client: reqwest::Client,
    /// The drill's reads of /metrics, from 127.0.0.2: the attacker's address exhausts its
    /// own budget for the routes outside /v1.
    monitor: reqwest::Client,
    secs: Duration,
    good: Arc<Tally>,
    /// The runner's submissions (by its organisation's token) and its signed reports.
    submitted: Arc<Tally>,
    reported: Arc<Tally>,
    /// Stops the good client and the runner (before the sleeping policy is made active).
    paused: AtomicBool,
    criteria: [String; 5],
    /// One line per broken criterion and occasion.
    broken: Mutex<Vec<String>>,
}

fn rss_mib() -> f64 {
    let Ok(pid) = std::env::var("SERVER_PID") else {
        return 0.0;
    };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

async fn redis_used_mib() -> Option<f64> {
    let url = std::env::var("REDIS_URL").ok()?;
    let client = redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|b| b / (1024.0 * 1024.0))
}

impl Drill {
    /// Records that criterion `n` (1-based) broke, and why.
    fn breaks(&self, n: usize, why: impl std::fmt::Display) {
        let name = self.criteria[n - 1]
            .split(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        self.broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("FAILED criterion {n} ({name}): {why}"));
    }

    async fn metrics(&self) -> String {
        match self
            .monitor
            .get(format!("{}/metrics", self.server))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r.text().await.unwrap_or_default(),
            other => {
                // Without the figures the drill cannot say the server was fine.
                self.breaks(
                    2,
                    format!("could not read /metrics ({})", outcome_of(other)),
                );
                String::new()
            }
        }
    }

    /// Sum of a counter family's series whose labels contain `filter`.
    async fn counter(&self, family: &str, filter: &str) -> u64 {
        self.metrics()
            .await
            .lines()
            .filter(|l| {
                l.strip_prefix(family)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter(|l| l.contains(filter))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    async fn server_errors(&self) -> u64 {
        self.counter("http_requests_total", "status=\"5").await
    }

    /// Judges what the good client and the runner got since the last judgement (criterion 1),
    /// and returns it shown. In an attack phase each of them must have been answered; the
    /// stretch after the last one may be too short for that.
    fn judge_clients(&self, phase: &str, may_be_empty: bool) -> (bool, String) {
        let (good, submitted, reported) = (
            self.good.take(),
            self.submitted.take(),
            self.reported.take(),
        );
        let mut ok = true;
        for (who, tally) in [
            ("the good client", &good),
            ("the runner's submissions", &submitted),
            ("the runner's signed reports", &reported),
        ] {
            if !(all_2xx(tally) || (may_be_empty && tally.is_empty())) {
                ok = false;
                self.breaks(1, format!("{phase}: {who} got {}", show(tally)));
            }
        }
        (
            ok,
            format!(
                "good client: {}; runner submissions: {}, signed reports: {}",
                show(&good),
                show(&submitted),
                show(&reported)
            ),
        )
    }

    /// Runs `attack` for the drill's time and reports it beside the good client and runner
    /// (judged on everything since the previous phase). `attack` returns the attacker's
    /// outcomes and a note.
    async fn attack<F, Fut>(&self, name: &str, attack: F) -> Res<()>
    where
        F: FnOnce(Instant) -> Fut,
        Fut: std::future::Future<Output = Res<(BTreeMap<String, u64>, String)>>,
    {
        let (rss, errors, redis) = (
            rss_mib(),
            self.server_errors().await,
            redis_used_mib().await,
        );
        let (tally, note) = attack(Instant::now() + self.secs).await?;
        let (clients_ok, clients) = self.judge_clients(name, false);
        let errors = self.server_errors().await.saturating_sub(errors);
        let (answered, refused) = (answers(&tally), tally.get("429").copied().unwrap_or(0));
        let ran = answered >= MIN_ANSWERS && refused > 0;
        if !ran {
            self.breaks(
                5,
                format!(
                    "{name}: the attacker got {answered} answers, {refused} of them 429 ({})",
                    show(&tally)
                ),
            );
        }
        let redis = match (redis, redis_used_mib().await) {
            (Some(before), Some(after)) => format!("; Redis {before:.1} → {after:.1} MiB"),
            _ => String::new(),
        };
        println!(
            "## {name}: {}\n  attacker: {}{note}\n  {clients}\n  server 5xx: {errors}; RSS {rss:.1} → {:.1} MiB{redis}",
            if clients_ok && ran && errors == 0 {
                "ok"
            } else {
                "FAILED"
            },
            show(&tally),
            rss_mib(),
        );
        Ok(())
    }
}

/// The well-behaved client: its organisation's activity, five times a second.
fn good_client(drill: Arc<Drill>, t: Arc<Tenant>) {
    tokio::spawn(async move {
        let url = format!(
            "{}/v1/workspaces/{}/activity?limit=5",
            drill.server, t.workspace
        );
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if drill.paused.load(Ordering::Relaxed) {
                continue;
            }
            let outcome = outcome_of(
                drill
                    .good_client
                    .get(&url)
                    .bearer_auth(&t.token)
                    .send()
                    .await,
            );
            drill.good.add(outcome);
        }
    });
}

/// The runner: twice a second a command is submitted to its pool (by its organisation's token)
/// and the runner reports the delivery, signed, from the same address as the attacker. Every
/// submission is counted: one that fails, or whose answer names no delivery, is a failure.
fn good_runner(drill: Arc<Drill>, t: Arc<Tenant>, runner: (uuid::Uuid, uuid::Uuid, [u8; 32])) {
    tokio::spawn(async move {
        let (runner_id, key_id, private) = runner;
        let submit = format!(
            "{}/v1/workspaces/{}/runner-commands",
            drill.server, t.workspace
        );
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if drill.paused.load(Ordering::Relaxed) {
                continue;
            }
            let created = drill
                .good_client
                .post(&submit)
                .bearer_auth(&t.token)
                .json(&json!({ "poolId": t.pool, "command": "echo" }))
                .send()
                .await;
            let delivery = match created {
                Ok(r) if r.status().is_success() => {
                    let status = r.status().as_u16();
                    let delivery = r
                        .json::<Value>()
                        .await
                        .ok()
                        .and_then(|v| v["command"]["deliveryId"].as_str().map(str::to_owned));
                    drill.submitted.add(match delivery {
                        Some(_) => status.to_string(),
                        None => format!("{status} without deliveryId"),
                    });
                    delivery
                }
                other => {
                    drill.submitted.add(outcome_of(other));
                    None
                }
            };
            let Some(delivery) = delivery else { continue };
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
            let mut request = drill
                .runner_client
                .post(format!("{}{path}", drill.server))
                .header("content-type", "application/json")
                .body(body.to_vec());
            for (name, value) in headers.pairs() {
                request = request.header(name, value);
            }
            drill.reported.add(outcome_of(request.send().await));
        }
    });
}

/// `workers` loops of `one` until the deadline; their outcomes tallied.
async fn flood<F, Fut>(workers: usize, deadline: Instant, one: F) -> BTreeMap<String, u64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = String> + Send,
{
    let tally = Arc::new(Tally::default());
    let one = Arc::new(one);
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (tally, one) = (tally.clone(), one.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    tally.add(one(w).await);
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    tally.take()
}

/// A client whose connections leave from `address` (any of 127.0.0.0/8 reaches the server).
fn client_from(address: [u8; 4]) -> Res<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(address))
        .timeout(Duration::from_secs(30))
        .build()?)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> Res<()> {
    let server = std::env::var("SERVER").unwrap_or_else(|_| "http://127.0.0.1:18090".into());
    let secs = env_u64("DRILL_SECS", 10);
    let deadline_ms = env_u64("CP_POLICY_DEADLINE_MS", 50);
    let margin_ms = env_u64("DRILL_POLICY_MARGIN_MS", 50);
    let criteria = criteria(deadline_ms, margin_ms);
    println!("# abuse drill against {server}, {secs} s per attack\n\ncriteria:");
    for (n, criterion) in criteria.iter().enumerate() {
        println!("  {}. {criterion}", n + 1);
    }
    println!();

    let mut config = ServerConfig::for_database(std::env::var("DATABASE_URL")?);
    config.token_hash_key = std::env::var("CP_TOKEN_HASH_KEY").ok();
    let services = open_services(&config).await?;
    let cid = CorrelationId::generate();
    let attacker = Arc::new(tenant(&services, "attacker").await?);
    let good = Arc::new(tenant(&services, "good").await?);
    // The sleeping policy is timed with a tenant of its own: no phase spends its budgets.
    let measure = tenant(&services, "measure").await?;
    let runner = services
        .register_runner(good.pool, "drill", None, None, &cid)
        .await?;
    let private = runner.private_key.ok_or("no private key")?;
    // The attacker's user holds many tokens, each with its own per-token budget.
    let mut tokens = Vec::new();
    for n in 0..50 {
        let issued = services
            .issue_token_for_user(
                attacker.user,
                IssueTokenInput::new(
                    TokenName::parse(&format!("many-{n}"))?,
                    Scopes::all(),
                    attacker.org,
                    vec![attacker.workspace],
                    vec![],
                    ExpiresInDays::default(),
                )?,
                &cid,
            )
            .await?;
        tokens.push(issued.secret.expose().to_owned());
    }
    let tokens = Arc::new(tokens);

    let drill = Arc::new(Drill {
        server: server.clone(),
        client: client_from([127, 0, 0, 1])?,
        good_client: client_from([127, 0, 0, 3])?,
        runner_client: client_from([127, 0, 0, 1])?,
        monitor: client_from([127, 0, 0, 2])?,
        secs: Duration::from_secs(secs),
        good: Arc::default(),
        submitted: Arc::default(),
        reported: Arc::default(),
        paused: AtomicBool::new(false),
        criteria,
        broken: Mutex::default(),
    });
    let errors_at_start = drill.server_errors().await;
    good_client(drill.clone(), good.clone());
    good_runner(
        drill.clone(),
        good.clone(),
        (runner.runner.id, runner.key_id, private),
    );

    let activity = format!(
        "{server}/v1/workspaces/{}/activity?limit=5",
        attacker.workspace
    );

    drill
        .attack("80 audit streams from one token", |deadline| {
            let (client, token) = (drill.client.clone(), attacker.token.clone());
            let url = format!("{server}/v1/workspaces/{}/audit/stream", attacker.workspace);
            async move {
                let tally = Tally::default();
                let mut open = Vec::new();
                for _ in 0..80 {
                    match client.get(&url).bearer_auth(&token).send().await {
                        Ok(r) => {
                            tally.add(r.status().as_u16().to_string());
                            if r.status().is_success() {
                                open.push(r);
                            }
                        }
                        Err(_) => tally.add(CONNECTION_ERROR),
                    }
                }
                tokio::time::sleep_until(deadline.into()).await;
                drop(open);
                Ok((tally.take(), String::new()))
            }
        })
        .await?;

    drill
        .attack("junk bearer flood (64 connections)", |deadline| {
            let (client, url) = (drill.client.clone(), activity.clone());
            async move {
                let tally = flood(64, deadline, move |w| {
                    let request = client
                        .get(&url)
                        .bearer_auth(format!("cp_junk{w}_{}", uuid::Uuid::new_v4().simple()));
                    async move { outcome_of(request.send().await) }
                })
                .await;
                Ok((tally, String::new()))
            }
        })
        .await?;

    drill
        .attack("one user's 50 tokens at once", |deadline| {
            let (client, url, tokens) = (drill.client.clone(), activity.clone(), tokens.clone());
            let (started, count) = (Instant::now(), tokens.len());
            async move {
                let tally = flood(50, deadline, move |w| {
                    let request = client.get(&url).bearer_auth(&tokens[w]);
                    async move { outcome_of(request.send().await) }
                })
                .await;
                let served = tally.get("200").copied().unwrap_or(0);
                let note = format!(
                    " ({served} served in {:.0} s; the tokens' own budgets would allow {})",
                    started.elapsed().as_secs_f64(),
                    count * 600
                );
                Ok((tally, note))
            }
        })
        .await?;

    drill
        .attack("stored idempotency bytes (64 × 4 KiB args)", |deadline| {
            let client = drill.client.clone();
            let url = format!(
                "{server}/v1/workspaces/{}/runner-commands",
                attacker.workspace
            );
            let body = json!({
                "poolId": attacker.pool,
                "command": "echo",
                "args": vec!["x".repeat(4096); 64],
            });
            let tokens = tokens.clone();
            let quota = Arc::new(AtomicU64::new(0));
            let counted = quota.clone();
            async move {
                let tally = flood(8, deadline, move |w| {
                    let request = client
                        .post(&url)
                        .bearer_auth(&tokens[w])
                        .header("idempotency-key", uuid::Uuid::new_v4().to_string())
                        .json(&body);
                    let counted = counted.clone();
                    async move {
                        match request.send().await {
                            Ok(r) => {
                                let status = r.status().as_u16();
                                let body: Value = r.json().await.unwrap_or(Value::Null);
                                if body["error"]["code"] == "idempotency_quota_exceeded" {
                                    counted.fetch_add(1, Ordering::Relaxed);
                                }
                                status.to_string()
                            }
                            Err(_) => CONNECTION_ERROR.into(),
                        }
                    }
                })
                .await;
                let note = format!(
                    "; {} of the 429s were the idempotency quota",
                    quota.load(Ordering::Relaxed)
                );
                Ok((tally, note))
            }
        })
        .await?;

    let series_before = drill
        .metrics()
        .await
        .lines()
        .filter(|l| l.starts_with("http_requests_total{"))
        .count();
    drill
        .attack("invented methods", |deadline| {
            let (client, url) = (drill.client.clone(), activity.clone());
            async move {
                let tally = flood(16, deadline, move |_| {
                    let name = format!("X{}", uuid::Uuid::new_v4().simple()).to_uppercase();
                    let method = reqwest::Method::from_bytes(name.as_bytes())
                        .unwrap_or(reqwest::Method::PATCH);
                    let request = client.request(method, &url);
                    async move { outcome_of(request.send().await) }
                })
                .await;
                Ok((tally, String::new()))
            }
        })
        .await?;
    let series_after = drill
        .metrics()
        .await
        .lines()
        .filter(|l| l.starts_with("http_requests_total{"))
        .count();
    println!("  request series in /metrics: {series_before} → {series_after}");

    let pings_before = drill.counter("readiness_pings_total", "").await;
    drill
        .attack("/readyz and /metrics flood (32 connections)", |deadline| {
            let client = drill.client.clone();
            let server = server.clone();
            async move {
                let tally = flood(32, deadline, move |w| {
                    let path = if w % 2 == 0 { "/readyz" } else { "/metrics" };
                    let request = client.get(format!("{server}{path}"));
                    async move { outcome_of(request.send().await) }
                })
                .await;
                Ok((tally, String::new()))
            }
        })
        .await?;
    println!(
        "  store pings for /readyz during the flood: {}",
        drill
            .counter("readiness_pings_total", "")
            .await
            .saturating_sub(pings_before)
    );

    // A policy author's attack: an authorizer that sleeps 30 s in a host call. First as the
    // shadow of the active policy, under the attacker's load: the good client must not notice.
    let sleeper = services
        .install_policy("drill-sleep", PolicyKind::Authorizer, fixtures::SLEEP)
        .await?;
    let sleeper_ref = format!("drill-sleep@{}", sleeper.version);
    services.shadow_policy(Some(&sleeper_ref)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let dropped_before = drill.counter("policy_shadow_dropped_total", "").await;
    drill
        .attack(
            "a sleeping shadow policy under one user's 50 tokens",
            |deadline| {
                let (client, url, tokens) =
                    (drill.client.clone(), activity.clone(), tokens.clone());
                async move {
                    let tally = flood(50, deadline, move |w| {
                        let request = client.get(&url).bearer_auth(&tokens[w]);
                        async move { outcome_of(request.send().await) }
                    })
                    .await;
                    Ok((tally, String::new()))
                }
            },
        )
        .await?;
    println!(
        "  shadow evaluations dropped: {}",
        drill
            .counter("policy_shadow_dropped_total", "")
            .await
            .saturating_sub(dropped_before)
    );
    services.shadow_policy(None).await?;

    // Then active: every decision must end at the deadline, not after 30 s, and fail closed.
    // The good client and the runner stop first (the policy refuses them too, by design); what
    // they got since the last phase is judged like a phase.
    drill.paused.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (tail_ok, tail) = drill.judge_clients("after the last attack", true);
    println!(
        "## after the last attack, until the good client and the runner stop: {}\n  {tail}",
        if tail_ok { "ok" } else { "FAILED" }
    );
    services.activate_policy(&sleeper_ref).await?;
    let timed = client_from([127, 0, 0, 4])?;
    let measure_activity = format!(
        "{server}/v1/workspaces/{}/activity?limit=5",
        measure.workspace
    );
    let limit = Duration::from_millis(deadline_ms + margin_ms);
    let mut latencies = Vec::new();
    let outcomes = Tally::default();
    let (mut late, mut wrong) = (Vec::new(), 0);
    let started = Instant::now();
    while latencies.len() < SAMPLES && started.elapsed() < Duration::from_secs(60) {
        let begin = Instant::now();
        let answer = timed
            .get(&measure_activity)
            .bearer_auth(&measure.token)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        let outcome = match answer {
            Ok(r) => {
                let status = r.status().as_u16();
                let body: Value = r.json().await.unwrap_or(Value::Null);
                match body["error"]["code"].as_str() {
                    Some(code) => format!("{status} {code}"),
                    None => status.to_string(),
                }
            }
            Err(_) => CONNECTION_ERROR.into(),
        };
        let took = begin.elapsed();
        if latencies.is_empty() && outcome == "200" {
            // The server has not loaded the new policy yet: the measurement starts at the
            // first request it refuses.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        if took > limit {
            late.push(format!("#{} {took:.1?}", latencies.len() + 1));
        }
        if outcome != "403 policy_error" {
            wrong += 1;
        }
        latencies.push(took);
        outcomes.add(outcome);
    }
    services.rollback_policy(PolicyKind::Authorizer).await?;
    latencies.sort();
    let worst = latencies.last().copied().unwrap_or_default();
    let outcomes = outcomes.take();
    let policy_ok = latencies.len() == SAMPLES && late.is_empty() && wrong == 0;
    if latencies.len() < SAMPLES {
        drill.breaks(
            4,
            format!(
                "{} of {SAMPLES} requests timed in 60 s (the policy never refused the rest)",
                latencies.len()
            ),
        );
    }
    if !late.is_empty() {
        drill.breaks(
            4,
            format!(
                "{} of {} requests took longer than {limit:?}: {}{}",
                late.len(),
                latencies.len(),
                late[..late.len().min(5)].join(", "),
                if late.len() > 5 { ", …" } else { "" }
            ),
        );
    }
    if wrong > 0 {
        drill.breaks(
            4,
            format!(
                "{wrong} of {} answers were not 403 policy_error: {}",
                latencies.len(),
                show(&outcomes)
            ),
        );
    }
    println!(
        "## the sleeping policy active: {}\n  {} requests: {}; latency p50 {:.1?}, max {worst:.1?}; limit {limit:?}, {} over it (the policy sleeps 30 s)",
        if policy_ok { "ok" } else { "FAILED" },
        latencies.len(),
        show(&outcomes),
        latencies
            .get(latencies.len() / 2)
            .copied()
            .unwrap_or_default(),
        late.len(),
    );

    let errors = drill.server_errors().await.saturating_sub(errors_at_start);
    if errors > 0 {
        drill.breaks(2, format!("the server answered {errors} 5xx"));
    }
    println!("\nserver 5xx over the whole drill: {errors}");
    let broken = std::mem::take(&mut *drill.broken.lock().unwrap_or_else(|e| e.into_inner()));
    for line in &broken {
        println!("{line}");
    }
    if broken.is_empty() {
        println!("criteria 1, 2, 4 and 5 met (3 is the script's to check)");
        Ok(())
    } else {
        println!("abuse drill: FAILED; the lines above name each broken criterion");
        std::process::exit(1);
    }
}
