//! `cpctl policies decisions`: the policy decision log over HTTP, newest first, filtered by
//! the server.

use clap::Args;
use control_plane::policy::DecisionOutcome;
use control_plane::service::DECISION_LIST_MAX;

use crate::cli::OutputFormat;
use crate::fleet::Since;
use crate::output::{self, Cell, Column};
use crate::remote::Client;

const DECISION: &[Column] = &[
    ("WHEN", "occurredAt", Cell::Text),
    ("KIND", "kind", Cell::Text),
    ("OPERATION", "operation", Cell::Text),
    ("OUTCOME", "outcome", Cell::Text),
    ("POLICY", "policy", Cell::Text),
    ("MICROS", "latencyMicros", Cell::Text),
    ("CORRELATION", "correlationId", Cell::Text),
    ("REASON", "reason", Cell::Text),
];

#[derive(Debug, Args)]
pub struct DecisionsArgs {
    /// Decisions since T: an RFC 3339 time, or a length of time ago (`1h`, `7d`).
    #[arg(long)]
    pub since: Option<Since>,
    /// Only this operation (an operation id such as `issueToken`, or `review`, `report`).
    #[arg(long)]
    pub operation: Option<String>,
    /// Only this outcome: allow, deny, publish, hold, reject, hide or failure.
    #[arg(long, value_parser = DecisionOutcome::parse)]
    pub outcome: Option<DecisionOutcome>,
    #[arg(long, default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(DECISION_LIST_MAX)))]
    pub limit: u32,
}

pub async fn list(client: &Client, out: OutputFormat, args: DecisionsArgs) -> anyhow::Result<()> {
    let mut filters = Vec::new();
    if let Some(since) = args.since {
        let at = since.at(chrono::Utc::now());
        filters.push((
            "since",
            at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        ));
    }
    if let Some(operation) = args.operation {
        filters.push(("operation", operation));
    }
    if let Some(outcome) = args.outcome {
        filters.push(("outcome", outcome.as_str().to_owned()));
    }
    let path = "/v1/policies/decisions";
    let mut items = crate::policies::newest(client, path, &filters, args.limit).await?;
    if out == OutputFormat::Table {
        // A failure shows its kind beside the outcome, as the log records it.
        for item in &mut items {
            if let Some(kind) = item["failure"].as_str().map(str::to_owned) {
                let outcome = item["outcome"].as_str().unwrap_or("-").to_owned();
                item["outcome"] = format!("{outcome} ({kind})").into();
            }
        }
    }
    output::rows(out, DECISION, &items);
    Ok(())
}
