//! `cpctl runners list|disable|enable|remove` and `cpctl deliveries list|resend|recover`: a
//! pool's runners and deliveries after the fact (the rules are in the server's
//! `service/runner_admin.rs`).

use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use control_plane::domain::{CorrelationId, DeliveryStatus, Span, Timestamp};
use control_plane::service::{Resent, Services};
use control_plane::storage::{DeliverySummary, RunnerStatus};

use crate::cli::OutputFormat;
use crate::output::{self, Render};

/// `--since`: an RFC 3339 time, or a length of time ago (`24h`, `7d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    At(Timestamp),
    Ago(Span),
}

impl Since {
    pub fn at(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Since::At(at) => at.get(),
            Since::Ago(span) => now - span.duration(),
        }
    }
}

impl FromStr for Since {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        if let Ok(at) = Timestamp::parse(raw) {
            return Ok(Since::At(at));
        }
        raw.parse::<Span>().map(Since::Ago).map_err(|_| {
            format!(
                "`{raw}` is neither an RFC 3339 time nor a length of time ago such as 24h or 7d"
            )
        })
    }
}

pub fn delivery_state(raw: &str) -> Result<DeliveryStatus, String> {
    DeliveryStatus::parse(raw)
}

fn time(at: Option<DateTime<Utc>>) -> String {
    at.map(|t| Timestamp::new(t).to_string())
        .unwrap_or_default()
}

/// A runner's state as `runners list` shows it.
fn runner_state(r: &RunnerStatus) -> &'static str {
    if r.removed_at.is_some() {
        "removed"
    } else if r.disabled_at.is_some() {
        "disabled"
    } else if r.held_until.is_some_and(|t| t > Utc::now()) {
        "held"
    } else {
        "enabled"
    }
}

pub async fn list_runners(
    services: &Services,
    out: OutputFormat,
    pool: Uuid,
) -> anyhow::Result<()> {
    output::list(out, &services.list_runners(pool).await?);
    Ok(())
}

/// `disable`, `enable` or `remove`, with one line (or object) saying what was done.
pub async fn change_runner(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    runner: Uuid,
    verb: &str,
) -> anyhow::Result<()> {
    let mut shown = json!({ "runnerId": runner, "changed": true });
    match verb {
        "disable" => {
            shown["changed"] = json!(services.disable_runner(runner, cid).await?);
            shown["state"] = json!("disabled");
        }
        "enable" => {
            shown["changed"] = json!(services.enable_runner(runner, cid).await?);
            shown["state"] = json!("enabled");
        }
        _ => {
            let removed = services.remove_runner(runner, cid).await?;
            shown["state"] = json!("removed");
            shown["keysRevoked"] = json!(removed.keys_revoked);
            shown["deliveriesMoved"] = json!(removed.deliveries_moved);
        }
    }
    match out {
        OutputFormat::Json => println!("{shown}"),
        OutputFormat::Table => match verb {
            "remove" => println!(
                "runner {runner} removed: {} keys revoked, {} deliveries moved to the pool's other runners",
                shown["keysRevoked"], shown["deliveriesMoved"]
            ),
            _ => println!(
                "runner {runner} {}{}",
                if shown["changed"] == true {
                    ""
                } else {
                    "was already "
                },
                shown["state"].as_str().unwrap_or_default()
            ),
        },
    }
    Ok(())
}

pub async fn list_deliveries(
    services: &Services,
    out: OutputFormat,
    pool: Uuid,
    state: Option<DeliveryStatus>,
    since: Option<Since>,
    limit: u32,
) -> anyhow::Result<()> {
    let since = since.map(|s| s.at(Utc::now()));
    let found = services.list_deliveries(pool, state, since, limit).await?;
    output::list(out, &found);
    Ok(())
}

fn resent_json(r: &Resent) -> Value {
    json!({
        "deliveryId": r.delivery_id,
        "sentAs": r.sent_as,
        "newCommandId": r.new_command_id,
        "webhookId": r.webhook_id,
    })
}

pub async fn resend(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    delivery: Uuid,
) -> anyhow::Result<()> {
    let r = services.resend_delivery(delivery, cid).await?;
    match out {
        OutputFormat::Json => println!("{}", resent_json(&r)),
        OutputFormat::Table => match r.new_command_id {
            None => println!(
                "delivery {} resent (webhook-id {})",
                r.delivery_id, r.webhook_id
            ),
            Some(command) => println!(
                "delivery {} resent as command {command}, delivery {} (webhook-id {})",
                r.delivery_id, r.sent_as, r.webhook_id
            ),
        },
    }
    Ok(())
}

pub async fn recover(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    pool: Uuid,
    since: Since,
) -> anyhow::Result<()> {
    let since = since.at(Utc::now());
    let resent = services.recover_deliveries(pool, since, cid).await?;
    match out {
        OutputFormat::Json => println!(
            "{}",
            json!({
                "resent": resent.len(),
                "since": Timestamp::new(since),
                "deliveries": resent.iter().map(resent_json).collect::<Vec<_>>(),
            })
        ),
        OutputFormat::Table => println!(
            "{} failed deliveries since {} resent",
            resent.len(),
            Timestamp::new(since)
        ),
    }
    Ok(())
}

impl Render for RunnerStatus {
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "poolId": self.pool_id,
            "name": self.name,
            "url": self.delivery_url,
            "state": runner_state(self),
            "disabledReason": self.disabled_reason,
            "disabledAt": self.disabled_at.map(Timestamp::new),
            "removedAt": self.removed_at.map(Timestamp::new),
            "heldUntil": self.held_until.map(Timestamp::new),
            "failuresInARow": self.consecutive_failures,
            "failingSince": self.failing_since.filter(|_| self.consecutive_failures > 0).map(Timestamp::new),
            "lastSuccessAt": self.last_success_at.map(Timestamp::new),
            "lastFailureAt": self.last_failure_at.map(Timestamp::new),
            "createdAt": Timestamp::new(self.created_at),
            "keys": self.keys.iter().map(|k| json!({
                "id": k.id,
                "createdAt": Timestamp::new(k.created_at),
                "revokedAt": k.revoked_at.map(Timestamp::new),
            })).collect::<Vec<_>>(),
        })
    }

    fn headers() -> &'static [&'static str] {
        &[
            "ID",
            "NAME",
            "URL",
            "STATE",
            "FAILURES",
            "LAST SUCCESS",
            "LAST FAILURE",
            "KEYS",
        ]
    }

    fn row(&self) -> Vec<String> {
        let state = match &self.disabled_reason {
            Some(reason) if self.removed_at.is_none() => format!("disabled ({reason})"),
            _ => runner_state(self).to_owned(),
        };
        let live = self.keys.iter().filter(|k| k.revoked_at.is_none()).count();
        vec![
            self.id.to_string(),
            self.name.clone(),
            self.delivery_url.clone().unwrap_or_default(),
            state,
            self.consecutive_failures.to_string(),
            time(self.last_success_at),
            time(self.last_failure_at),
            format!("{live} live / {}", self.keys.len()),
        ]
    }
}

impl Render for DeliverySummary {
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "commandId": self.command_id,
            "poolId": self.pool_id,
            "status": self.status.as_str(),
            "commandStatus": self.command_status.as_str(),
            "attempts": self.attempts,
            "webhookId": self.webhook_id,
            "resentAs": self.resent_as,
            "nextAttemptAt": self.next_attempt_at.map(Timestamp::new),
            "waitingForRunner": self.waiting_for_runner,
            "detail": self.detail,
            "createdAt": Timestamp::new(self.created_at),
            "updatedAt": Timestamp::new(self.updated_at),
        })
    }

    fn headers() -> &'static [&'static str] {
        &[
            "ID",
            "STATUS",
            "COMMAND",
            "ATTEMPTS",
            "UPDATED",
            "NEXT ATTEMPT",
            "RESENT AS",
        ]
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.status.to_string(),
            format!("{} {}", self.command_id, self.command_status),
            self.attempts.to_string(),
            Timestamp::new(self.updated_at).to_string(),
            time(self.next_attempt_at),
            self.resent_as.map(|id| id.to_string()).unwrap_or_default(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_a_time_or_a_span_ago() {
        let now = Utc::now();
        let ago: Since = "24h".parse().unwrap();
        assert_eq!(ago.at(now), now - chrono::Duration::hours(24));
        let at: Since = "2026-11-01T10:00:00+01:00".parse().unwrap();
        assert_eq!(at.at(now).to_rfc3339(), "2026-11-01T09:00:00+00:00");
        assert!("yesterday".parse::<Since>().is_err());
    }
}
