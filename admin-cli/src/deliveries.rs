//! `cpctl deliveries`: a pool's webhook deliveries, one with every attempt (the full error of
//! each is here, never in events), and resending them, over the admin API. `--org` defaults to
//! the calling token's organisation; another organisation's pool or delivery is a 404.

use chrono::Utc;
use clap::Subcommand;
use serde_json::{Value, json};
use uuid::Uuid;

use control_plane::domain::{DeliveryStatus, Timestamp};

use crate::cli::OutputFormat;
use crate::output::{self, Cell, Column};
use crate::remote::Client;

const DELIVERY: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("STATUS", "status", Cell::Text),
    ("COMMAND", "commandId", Cell::Text),
    ("COMMAND STATUS", "commandStatus", Cell::Text),
    ("ATTEMPTS", "attempts", Cell::Text),
    ("UPDATED", "updatedAt", Cell::Text),
    ("NEXT ATTEMPT", "nextAttemptAt", Cell::Text),
    ("RESENT AS", "resentAs", Cell::Text),
];
const ATTEMPT: &[Column] = &[
    ("#", "number", Cell::Text),
    ("RUNNER", "runnerId", Cell::Text),
    ("STARTED", "startedAt", Cell::Text),
    ("STATUS", "statusCode", Cell::Text),
    ("LATENCY MS", "latencyMs", Cell::Text),
    ("ERROR", "error", Cell::Text),
];

#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// A webhook delivery: its state, its command's, when the next attempt is due, and every
    /// attempt (runner, URL, status, latency, error).
    Show {
        id: Uuid,
        /// The organisation (default: the token's).
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// A pool's deliveries, newest first.
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
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// Send a delivery again with the same webhook-id: a pending one now; a failed one as a new
    /// command (the failed command stays failed).
    Resend {
        id: Uuid,
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// Resend every delivery of the pool that failed since T (not resent yet), each once.
    Recover {
        #[arg(long)]
        pool: Uuid,
        /// An RFC 3339 time, or a length of time ago (24h, 7d).
        #[arg(long)]
        since: crate::fleet::Since,
        #[arg(long)]
        org: Option<Uuid>,
    },
}

pub async fn run(
    client: &Client,
    out: OutputFormat,
    command: DeliveriesCommand,
) -> anyhow::Result<()> {
    let org = match &command {
        DeliveriesCommand::Show { org, .. }
        | DeliveriesCommand::List { org, .. }
        | DeliveriesCommand::Resend { org, .. }
        | DeliveriesCommand::Recover { org, .. } => *org,
    };
    let base = format!("/v1/organisations/{}", client.organisation(org).await?);
    match command {
        DeliveriesCommand::Show { id, .. } => {
            let body = client.get(&format!("{base}/deliveries/{id}")).await?;
            show(out, &body["delivery"]);
        }
        DeliveriesCommand::List {
            pool,
            state,
            since,
            limit,
            ..
        } => {
            let mut query = String::new();
            if let Some(state) = state {
                query.push_str(&format!("&status={}", state.as_str()));
            }
            if let Some(since) = since {
                query.push_str(&format!("&since={}", Timestamp::new(since.at(Utc::now()))));
            }
            let path = format!("{base}/runner-pools/{pool}/deliveries");
            let found = newest(client, &path, &query, limit as usize).await?;
            output::rows(out, DELIVERY, &found);
        }
        DeliveriesCommand::Resend { id, .. } => {
            let body = client
                .post(&format!("{base}/deliveries/{id}/resend"), json!({}))
                .await?;
            let r = &body["resent"];
            match out {
                OutputFormat::Json => println!("{r}"),
                OutputFormat::Table => {
                    let text = |key: &str| r[key].as_str().unwrap_or("-").to_owned();
                    match r["newCommandId"].as_str() {
                        None => println!(
                            "delivery {} resent (webhook-id {})",
                            text("deliveryId"),
                            text("webhookId")
                        ),
                        Some(command) => println!(
                            "delivery {} resent as command {command}, delivery {} (webhook-id {})",
                            text("deliveryId"),
                            text("sentAs"),
                            text("webhookId")
                        ),
                    }
                }
            }
        }
        DeliveriesCommand::Recover { pool, since, .. } => {
            let since = Timestamp::new(since.at(Utc::now()));
            let body = client
                .post(
                    &format!("{base}/runner-pools/{pool}/deliveries/recover"),
                    json!({ "since": since.to_string() }),
                )
                .await?;
            match out {
                OutputFormat::Json => println!("{body}"),
                OutputFormat::Table => println!(
                    "{} failed deliveries since {} resent",
                    body["resent"].as_u64().unwrap_or(0),
                    body["since"].as_str().unwrap_or("-")
                ),
            }
        }
    }
    Ok(())
}

/// Up to `limit` items of a list the API gives newest first, page after page.
async fn newest(
    client: &Client,
    path: &str,
    query: &str,
    limit: usize,
) -> anyhow::Result<Vec<Value>> {
    let mut items = Vec::new();
    let mut cursor = String::new();
    while items.len() < limit {
        let size = (limit - items.len()).min(200);
        let page = client
            .get(&format!("{path}?limit={size}{query}{cursor}"))
            .await?;
        if let Some(found) = page["items"].as_array() {
            items.extend(found.iter().cloned());
        }
        match page["nextCursor"].as_str() {
            Some(next) if !next.is_empty() => cursor = format!("&cursor={next}"),
            _ => break,
        }
    }
    items.truncate(limit);
    Ok(items)
}

fn show(out: OutputFormat, delivery: &Value) {
    match out {
        OutputFormat::Json => println!("{delivery}"),
        OutputFormat::Table => {
            let text = |key: &str| delivery[key].as_str().unwrap_or("-").to_owned();
            println!(
                "delivery {}  {}  (command {} {})",
                text("id"),
                text("status"),
                text("commandId"),
                text("commandStatus")
            );
            if let Some(detail) = delivery["detail"].as_str() {
                println!("detail: {detail}");
            }
            match delivery["nextAttemptAt"].as_str() {
                Some(at) => println!("next attempt due: {at}"),
                None => println!("next attempt due: none"),
            }
            println!();
            let attempts = delivery["attempts"].as_array().cloned().unwrap_or_default();
            output::rows(out, ATTEMPT, &attempts);
        }
    }
}
