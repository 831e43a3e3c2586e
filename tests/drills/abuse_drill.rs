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

// A crate root's `mod` looks beside it (tests/drills/), so each path names the folder.
#[path = "abuse_drill/criteria.rs"]
mod criteria;
#[path = "abuse_drill/drill.rs"]
mod drill;
#[path = "abuse_drill/tally.rs"]
mod tally;
#[path = "abuse_drill/tenant.rs"]
mod tenant;
#[path = "abuse_drill/traffic.rs"]
mod traffic;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, ExpiresInDays, Scopes, TokenName};
use control_plane::policy::{PolicyKind, fixtures};
use control_plane::service::IssueTokenInput;
use control_plane::startup::open_services;
use serde_json::{Value, json};

use criteria::{SAMPLES, criteria};
use drill::Drill;
use tally::{CONNECTION_ERROR, Tally, outcome_of, show};
use tenant::tenant;
use traffic::{client_from, flood, good_client, good_runner};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

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
        .register_runner(
            good.pool,
            "drill",
            None,
            None,
            &control_plane::storage::WriteContext::admin(&cid),
        )
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
    // Recorded in the measuring tenant's log, as an anonymous admin's changes.
    let admin = control_plane::storage::WriteContext::admin(&CorrelationId::generate());
    let log = measure.org;
    let sleeper = services
        .install_policy(
            "drill-sleep",
            PolicyKind::Authorizer,
            fixtures::SLEEP,
            &admin,
            log,
        )
        .await?;
    let sleeper_ref = format!("drill-sleep@{}", sleeper.version);
    services
        .shadow_policy(Some(&sleeper_ref), &admin, log)
        .await?;
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
    services.shadow_policy(None, &admin, log).await?;

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
    // Over its measured budget by design: forced.
    services
        .activate_policy_with(&sleeper_ref, true, &admin, log)
        .await?;
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
    services
        .rollback_policy(PolicyKind::Authorizer, &admin, log)
        .await?;
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
