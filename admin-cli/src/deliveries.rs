//! `cpctl deliveries`: a webhook delivery with every attempt, for an administrator (the full
//! error of each attempt is here, never in events).

use clap::Subcommand;
use serde_json::{Value, json};
use uuid::Uuid;

use control_plane::domain::{CorrelationId, DeliveryStatus, Timestamp};
use control_plane::service::Services;
use control_plane::storage::{AttemptRecord, DeliveryReport};

use crate::cli::OutputFormat;
use crate::output::{self, Render};

#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// A webhook delivery: its state, its command's, when the next attempt is due, and every
    /// attempt (runner, URL, status, latency, error).
    Show { id: Uuid },
    /// A pool's deliveries, last changed first.
    List {
        #[arg(long)]
        pool: Uuid,
        /// pending, received, running, succeeded or failed.
        #[arg(long, value_parser = crate::fleet::delivery_state)]
        state: Option<DeliveryStatus>,
        /// Changed at or after: an RFC 3339 time, or a length of time ago (24h, 7d).
        #[arg(long)]
        since: Option<crate::fleet::Since>,
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
    },
    /// Send a delivery again with the same webhook-id: a pending one now; a failed one as a new
    /// command (the failed command stays failed).
    Resend { id: Uuid },
    /// Resend every delivery of the pool that failed since T (not resent yet), each once.
    Recover {
        #[arg(long)]
        pool: Uuid,
        /// An RFC 3339 time, or a length of time ago (24h, 7d).
        #[arg(long)]
        since: crate::fleet::Since,
    },
}

pub async fn deliveries(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: DeliveriesCommand,
) -> anyhow::Result<()> {
    let id = match command {
        DeliveriesCommand::Show { id } => id,
        DeliveriesCommand::List {
            pool,
            state,
            since,
            limit,
        } => return crate::fleet::list_deliveries(services, out, pool, state, since, limit).await,
        DeliveriesCommand::Resend { id } => {
            return crate::fleet::resend(services, out, cid, id).await;
        }
        DeliveriesCommand::Recover { pool, since } => {
            return crate::fleet::recover(services, out, cid, pool, since).await;
        }
    };
    let report = services.delivery_report(id).await?;
    match out {
        OutputFormat::Json => println!("{}", delivery_json(&report)),
        OutputFormat::Table => {
            println!(
                "delivery {}  {}  (command {} {})",
                report.delivery_id, report.status, report.command_id, report.command_status
            );
            if let Some(detail) = &report.detail {
                println!("detail: {detail}");
            }
            match report.next_attempt_at {
                Some(at) => println!("next attempt due: {}", Timestamp::new(at)),
                None => println!("next attempt due: none"),
            }
            println!();
            output::list(out, &report.attempts);
        }
    }
    Ok(())
}

fn delivery_json(report: &DeliveryReport) -> Value {
    json!({
        "deliveryId": report.delivery_id,
        "commandId": report.command_id,
        "workspaceId": report.workspace_id,
        "poolId": report.pool_id,
        "status": report.status.as_str(),
        "commandStatus": report.command_status.as_str(),
        "detail": report.detail,
        "nextAttemptAt": report.next_attempt_at.map(Timestamp::new),
        "attempts": report.attempts.iter().map(Render::json).collect::<Vec<_>>(),
    })
}

impl Render for AttemptRecord {
    fn json(&self) -> Value {
        json!({
            "number": self.number,
            "runnerId": self.runner_id,
            "url": self.url,
            "startedAt": Timestamp::new(self.started_at),
            "finishedAt": self.finished_at.map(Timestamp::new),
            "statusCode": self.status_code,
            "latencyMs": self.latency_ms,
            "error": self.error,
        })
    }

    fn headers() -> &'static [&'static str] {
        &["#", "RUNNER", "STARTED", "STATUS", "LATENCY", "ERROR"]
    }

    fn row(&self) -> Vec<String> {
        let status = match (self.status_code, self.finished_at) {
            (Some(code), _) => code.to_string(),
            (None, Some(_)) => "-".into(),
            (None, None) if self.error.is_some() => "abandoned".into(),
            (None, None) => "in flight".into(),
        };
        vec![
            self.number.to_string(),
            self.runner_id.to_string(),
            Timestamp::new(self.started_at).to_string(),
            status,
            self.latency_ms
                .map(|ms| format!("{ms} ms"))
                .unwrap_or_default(),
            self.error.clone().unwrap_or_default(),
        ]
    }
}
