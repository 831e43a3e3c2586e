//! Issue #13's abuse drill: each attack runs against a release server for a bounded time while a
//! well-behaved client and a runner of another organisation keep working. For every attack it
//! prints what the attacker got, what the good client and the runner got, the server's 5xx and
//! its RSS before and after. `tests/drills/abuse.sh` starts the server and runs this.
//!
//! Env: DATABASE_URL and CP_TOKEN_HASH_KEY (the server's, for set-up), SERVER (base URL),
//! SERVER_PID (for RSS), REDIS_URL (for Redis memory), DRILL_SECS (per attack, default 10).
//! Exits non-zero when the good client or the runner was refused, or any 5xx was served.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, ExpiresInDays, Scopes, TokenName, sign_request};
use control_plane::policy::{PolicyKind, fixtures};
use control_plane::service::{BootstrapInput, IssueTokenInput, Services};
use control_plane::startup::open_services;
use serde_json::{Value, json};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

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

/// Outcomes by status, for one side of one attack.
#[derive(Default)]
struct Tally(std::sync::Mutex<BTreeMap<u16, u64>>);

impl Tally {
    fn add(&self, status: u16) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(status)
            .or_default() += 1;
    }

    fn take(&self) -> BTreeMap<u16, u64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

fn show(tally: &BTreeMap<u16, u64>) -> String {
    if tally.is_empty() {
        return "nothing".into();
    }
    tally
        .iter()
        .map(|(status, n)| format!("{n}×{status}"))
        .collect::<Vec<_>>()
        .join(" ")
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
    runner: Arc<Tally>,
    failed: AtomicBool,
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
    async fn metrics(&self) -> String {
        match self
            .monitor
            .get(format!("{}/metrics", self.server))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r.text().await.unwrap_or_default(),
            _ => {
                // Without the figures the drill cannot say the server was fine.
                self.failed.store(true, Ordering::Relaxed);
                eprintln!("could not read /metrics");
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

    /// Runs `attack` for the drill's time and reports it beside the good client and runner.
    async fn attack<F, Fut>(&self, name: &str, attack: F) -> Res<()>
    where
        F: FnOnce(Instant) -> Fut,
        Fut: std::future::Future<Output = Res<String>>,
    {
        let (rss, errors, redis) = (
            rss_mib(),
            self.server_errors().await,
            redis_used_mib().await,
        );
        self.good.take();
        self.runner.take();
        let outcome = attack(Instant::now() + self.secs).await?;
        let (good, runner) = (self.good.take(), self.runner.take());
        let errors = self.server_errors().await.saturating_sub(errors);
        let served =
            |t: &BTreeMap<u16, u64>| t.iter().all(|(s, _)| (200..300).contains(s)) && !t.is_empty();
        let ok = served(&good) && served(&runner) && errors == 0;
        if !ok {
            self.failed.store(true, Ordering::Relaxed);
        }
        let redis = match (redis, redis_used_mib().await) {
            (Some(before), Some(after)) => format!("; Redis {before:.1} → {after:.1} MiB"),
            _ => String::new(),
        };
        println!(
            "## {name}: {}\n  attacker: {outcome}\n  good client: {}; runner: {}\n  server 5xx: {errors}; RSS {rss:.1} → {:.1} MiB{redis}",
            if ok { "ok" } else { "FAILED" },
            show(&good),
            show(&runner),
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
            let status = match drill
                .good_client
                .get(&url)
                .bearer_auth(&t.token)
                .send()
                .await
            {
                Ok(r) => r.status().as_u16(),
                Err(_) => 599,
            };
            drill.good.add(status);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

/// The runner: twice a second a command is submitted to its pool (by its organisation's token)
/// and the runner reports the delivery, signed, from the same address as the attacker.
fn good_runner(drill: Arc<Drill>, t: Arc<Tenant>, runner: (uuid::Uuid, uuid::Uuid, [u8; 32])) {
    tokio::spawn(async move {
        let (runner_id, key_id, private) = runner;
        let submit = format!(
            "{}/v1/workspaces/{}/runner-commands",
            drill.server, t.workspace
        );
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let created = drill
                .good_client
                .post(&submit)
                .bearer_auth(&t.token)
                .json(&json!({ "poolId": t.pool, "command": "echo" }))
                .send()
                .await;
            let delivery = match created {
                Ok(r) if r.status().is_success() => r
                    .json::<Value>()
                    .await
                    .ok()
                    .and_then(|v| v["command"]["deliveryId"].as_str().map(str::to_owned)),
                Ok(r) => {
                    drill.runner.add(r.status().as_u16());
                    None
                }
                Err(_) => None,
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
            let status = match request.send().await {
                Ok(r) => r.status().as_u16(),
                Err(_) => 599,
            };
            drill.runner.add(status);
        }
    });
}

/// `workers` loops of `one` until the deadline; their statuses tallied.
async fn flood<F, Fut>(workers: usize, deadline: Instant, one: F) -> BTreeMap<u16, u64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = u16> + Send,
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

fn status_of(result: reqwest::Result<reqwest::Response>) -> u16 {
    result.map_or(599, |r| r.status().as_u16())
}

#[tokio::main]
async fn main() -> Res<()> {
    let server = std::env::var("SERVER").unwrap_or_else(|_| "http://127.0.0.1:18090".into());
    let secs = std::env::var("DRILL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let mut config = ServerConfig::for_database(std::env::var("DATABASE_URL")?);
    config.token_hash_key = std::env::var("CP_TOKEN_HASH_KEY").ok();
    let services = open_services(&config).await?;
    let cid = CorrelationId::generate();
    let attacker = Arc::new(tenant(&services, "attacker").await?);
    let good = Arc::new(tenant(&services, "good").await?);
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
        runner: Arc::default(),
        failed: AtomicBool::new(false),
    });
    good_client(drill.clone(), good.clone());
    good_runner(
        drill.clone(),
        good.clone(),
        (runner.runner.id, runner.key_id, private),
    );
    println!("# abuse drill against {server}, {secs} s per attack\n");

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
                            tally.add(r.status().as_u16());
                            if r.status().is_success() {
                                open.push(r);
                            }
                        }
                        Err(_) => tally.add(599),
                    }
                }
                tokio::time::sleep_until(deadline.into()).await;
                drop(open);
                Ok(show(&tally.take()))
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
                    async move { status_of(request.send().await) }
                })
                .await;
                Ok(show(&tally))
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
                    async move { status_of(request.send().await) }
                })
                .await;
                let served = tally.get(&200).copied().unwrap_or(0);
                Ok(format!(
                    "{} ({served} served in {:.0} s; the tokens' own budgets would allow {})",
                    show(&tally),
                    started.elapsed().as_secs_f64(),
                    count * 600
                ))
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
                                status
                            }
                            Err(_) => 599,
                        }
                    }
                })
                .await;
                Ok(format!(
                    "{}; {} of the 429s were the idempotency quota",
                    show(&tally),
                    quota.load(Ordering::Relaxed)
                ))
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
                    async move { status_of(request.send().await) }
                })
                .await;
                Ok(show(&tally))
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
                    async move { status_of(request.send().await) }
                })
                .await;
                Ok(show(&tally))
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
                        async move { status_of(request.send().await) }
                    })
                    .await;
                    Ok(show(&tally))
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

    // Then active: every decision must end at the 50 ms deadline, not after 30 s. The good
    // client is refused by design here (the policy fails closed), so it is not judged; its
    // token measures, as the attacker's budgets are spent.
    services.activate_policy(&sleeper_ref).await?;
    let good_activity = format!("{server}/v1/workspaces/{}/activity?limit=5", good.workspace);
    let mut latencies = Vec::new();
    let statuses = Tally::default();
    let started = Instant::now();
    while latencies.len() < 40 && started.elapsed() < Duration::from_secs(60) {
        let begin = Instant::now();
        let status = status_of(
            drill
                .good_client
                .get(&good_activity)
                .bearer_auth(&good.token)
                .send()
                .await,
        );
        if status == 200 {
            // The server has not loaded the new policy yet.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        latencies.push(begin.elapsed());
        statuses.add(status);
    }
    services.rollback_policy(PolicyKind::Authorizer).await?;
    latencies.sort();
    let worst = latencies.last().copied().unwrap_or_default();
    println!(
        "## the sleeping policy active: {}\n  40 requests: {}; latency p50 {:?}, max {worst:?} (the policy sleeps 30 s)",
        if worst < Duration::from_secs(5) {
            "ok"
        } else {
            "FAILED"
        },
        show(&statuses.take()),
        latencies
            .get(latencies.len() / 2)
            .copied()
            .unwrap_or_default(),
    );
    if worst >= Duration::from_secs(5) || latencies.len() < 40 {
        drill.failed.store(true, Ordering::Relaxed);
    }

    if drill.failed.load(Ordering::Relaxed) {
        return Err("the good client or the runner was refused, or a 5xx was served".into());
    }
    Ok(())
}
