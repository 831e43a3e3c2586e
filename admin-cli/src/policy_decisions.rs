//! `cpctl policies decisions`: the policy decision log, newest first, filtered by the store.

use clap::Args;
use control_plane::domain::Timestamp;
use control_plane::policy::DecisionOutcome;
use control_plane::service::{DECISION_LIST_MAX, DecisionListing, Services};
use control_plane::storage::PolicyDecisionRecord;
use serde_json::{Value, json};

use crate::cli::OutputFormat;
use crate::fleet::Since;
use crate::output::{self, Render};

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

pub async fn list(
    services: &Services,
    out: OutputFormat,
    args: DecisionsArgs,
) -> anyhow::Result<()> {
    let listing = DecisionListing {
        since: args.since.map(|s| s.at(chrono::Utc::now())),
        operation: args.operation,
        outcome: args.outcome,
        limit: args.limit,
    };
    output::list(out, &services.list_policy_decisions(&listing).await?);
    Ok(())
}

impl Render for PolicyDecisionRecord {
    fn json(&self) -> Value {
        json!({
            "occurredAt": Timestamp::new(self.occurred_at),
            "kind": self.kind,
            "operation": self.operation,
            "outcome": self.outcome,
            "failure": self.failure,
            "reason": self.reason,
            "policy": format!("{}@{}", self.policy_name, self.policy_version),
            "policyDigest": self.policy_digest,
            "latencyMicros": self.latency_us,
            "correlationId": self.correlation_id,
            "organisationId": self.organisation_id,
            "workspaceId": self.workspace_id,
        })
    }
    fn headers() -> &'static [&'static str] {
        &[
            "WHEN",
            "KIND",
            "OPERATION",
            "OUTCOME",
            "POLICY",
            "MICROS",
            "CORRELATION",
            "REASON",
        ]
    }
    fn row(&self) -> Vec<String> {
        let outcome = match &self.failure {
            Some(kind) => format!("{} ({kind})", self.outcome),
            None => self.outcome.clone(),
        };
        vec![
            Timestamp::new(self.occurred_at).to_string(),
            self.kind.clone(),
            self.operation.clone(),
            outcome,
            format!("{}@{}", self.policy_name, self.policy_version),
            self.latency_us.to_string(),
            self.correlation_id.clone().unwrap_or_default(),
            self.reason.clone().unwrap_or_default(),
        ]
    }
}
