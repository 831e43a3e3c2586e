//! The drill's shared state and its judgements: `Drill` holds each party's HTTP client (each on
//! connections of its own), the tallies of the good client and the runner and the broken
//! criteria; its methods read /metrics, judge what the good client and the runner got, and
//! run one attack phase and print its line, with the server's RSS and Redis memory around it.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Res;
use super::criteria::MIN_ANSWERS;
use super::tally::{Tally, all_2xx, answers, outcome_of, show};

pub(super) struct Drill {
    pub(super) server: String,
    /// The attacker's connections, from 127.0.0.1 (the runner's address too).
    pub(super) client: reqwest::Client,
    /// The good client's, from 127.0.0.3: its own connections, so a connection the server closed
    /// on the attacker is never reused for it.
    pub(super) good_client: reqwest::Client,
    /// The runner's, from 127.0.0.1 like the attacker, but on connections of its own.
    pub(super) runner_client: reqwest::Client,
    /// The drill's reads of /metrics, from 127.0.0.2: the attacker's address exhausts its
    /// own budget for the routes outside /v1.
    pub(super) monitor: reqwest::Client,
    pub(super) secs: Duration,
    pub(super) good: Arc<Tally>,
    /// The runner's submissions (by its organisation's token) and its signed reports.
    pub(super) submitted: Arc<Tally>,
    pub(super) reported: Arc<Tally>,
    /// Stops the good client and the runner (before the sleeping policy is made active).
    pub(super) paused: AtomicBool,
    pub(super) criteria: [String; 5],
    /// One line per broken criterion and occasion.
    pub(super) broken: Mutex<Vec<String>>,
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
    pub(super) fn breaks(&self, n: usize, why: impl std::fmt::Display) {
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

    pub(super) async fn metrics(&self) -> String {
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
    pub(super) async fn counter(&self, family: &str, filter: &str) -> u64 {
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

    pub(super) async fn server_errors(&self) -> u64 {
        self.counter("http_requests_total", "status=\"5").await
    }

    /// Judges what the good client and the runner got since the last judgement (criterion 1),
    /// and returns it shown. In an attack phase each of them must have been answered; the
    /// stretch after the last one may be too short for that.
    pub(super) fn judge_clients(&self, phase: &str, may_be_empty: bool) -> (bool, String) {
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
    pub(super) async fn attack<F, Fut>(&self, name: &str, attack: F) -> Res<()>
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
