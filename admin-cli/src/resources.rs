//! `cpctl pools|workflows|plugins|reviews|deliveries`: the resources the v1 API acts on (runner
//! pools, workflows, plugins and their reviews, webhook deliveries); runners are in `runners.rs`.

use clap::Subcommand;
use control_plane::domain::Timestamp;
use serde_json::{Value, json};
use uuid::Uuid;

use control_plane::domain::{CorrelationId, RevisionState};
use control_plane::service::{Services, UserRef};
use control_plane::storage::{
    AttemptRecord, DeliveryReport, Plugin, Review, RunnerPool, Workflow, WorkflowRevision,
};

use crate::cli::OutputFormat;
use crate::output::{self, Render};

#[derive(Debug, Subcommand)]
pub enum PoolsCommand {
    Create {
        #[arg(long)]
        workspace: Uuid,
        name: String,
    },
    List {
        #[arg(long)]
        workspace: Option<Uuid>,
    },
}

#[derive(Debug, Subcommand)]
pub enum WorkflowsCommand {
    Create {
        #[arg(long)]
        workspace: Uuid,
        name: String,
    },
    List {
        #[arg(long)]
        workspace: Option<Uuid>,
    },
    /// Revisions of a workflow.
    #[command(subcommand)]
    Revisions(RevisionsCommand),
}

#[derive(Debug, Subcommand)]
pub enum RevisionsCommand {
    /// A new `draft` revision, numbered one past the newest.
    Create {
        #[arg(long)]
        workflow: Uuid,
    },
    /// Approve a revision that is `pending_approval`, as an administrator of its organisation
    /// (audited as `workflow_revision.approved`).
    Approve(DecideArgs),
    /// Reject a revision that is `pending_approval`, as an administrator of its organisation
    /// (audited as `workflow_revision.rejected`).
    Reject(DecideArgs),
}

#[derive(Debug, clap::Args)]
pub struct DecideArgs {
    #[arg(long)]
    pub revision: Uuid,
    /// Why (1 to 1000 characters), kept in the audit event.
    #[arg(long)]
    pub reason: String,
    /// Who decides: a user id, or the email of a user of the revision's organisation, who must
    /// be one of its administrators, and to approve, not the user who requested the approval
    /// (unless `cpctl orgs self-approval allow`). Named, not authenticated: the event records
    /// `"via": "cpctl"`.
    #[arg(long, env = "CP_ACTOR")]
    pub actor: String,
}

#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    Create {
        /// The publishing organisation.
        #[arg(long)]
        org: Uuid,
        name: String,
    },
    List,
}

#[derive(Debug, Subcommand)]
pub enum ReviewsCommand {
    List {
        #[arg(long)]
        plugin: Uuid,
    },
    /// Restores a review hidden after reports: its reports are dismissed and the moderator
    /// decides again on its content alone (audited as `review.restored`).
    Restore {
        #[arg(long)]
        review: Uuid,
        /// Why (1 to 500 characters), kept in the audit event.
        #[arg(long)]
        reason: Option<String>,
    },
}

pub async fn pools(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: PoolsCommand,
) -> anyhow::Result<()> {
    match command {
        PoolsCommand::Create { workspace, name } => {
            let pool = services.create_pool(workspace, &name, cid).await?;
            output::created(out, &pool, pool.id);
        }
        PoolsCommand::List { workspace } => {
            output::list(out, &services.list_pools(workspace).await?)
        }
    }
    Ok(())
}

pub async fn workflows(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: WorkflowsCommand,
) -> anyhow::Result<()> {
    match command {
        WorkflowsCommand::Create { workspace, name } => {
            let workflow = services.create_workflow(workspace, &name, cid).await?;
            output::created(out, &workflow, workflow.id);
        }
        WorkflowsCommand::List { workspace } => {
            output::list(out, &services.list_workflows(workspace).await?)
        }
        WorkflowsCommand::Revisions(RevisionsCommand::Create { workflow }) => {
            let revision = services.create_revision(workflow, cid).await?;
            output::created(out, &revision, revision.id);
        }
        WorkflowsCommand::Revisions(RevisionsCommand::Approve(args)) => {
            decide(services, out, cid, RevisionState::Approved, args).await?
        }
        WorkflowsCommand::Revisions(RevisionsCommand::Reject(args)) => {
            decide(services, out, cid, RevisionState::Rejected, args).await?
        }
    }
    Ok(())
}

async fn decide(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    to: RevisionState,
    args: DecideArgs,
) -> anyhow::Result<()> {
    let actor = UserRef::parse(&args.actor)?;
    let revision = services
        .decide_revision(args.revision, to, &actor, &args.reason, cid)
        .await?;
    match out {
        OutputFormat::Json => println!("{}", revision.json()),
        OutputFormat::Table => output::list(out, std::slice::from_ref(&revision)),
    }
    Ok(())
}

pub async fn plugins(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: PluginsCommand,
) -> anyhow::Result<()> {
    match command {
        PluginsCommand::Create { org, name } => {
            let plugin = services.create_plugin(org, &name, cid).await?;
            output::created(out, &plugin, plugin.id);
        }
        PluginsCommand::List => output::list(out, &services.list_plugins().await?),
    }
    Ok(())
}

pub async fn reviews(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: ReviewsCommand,
) -> anyhow::Result<()> {
    match command {
        ReviewsCommand::List { plugin } => output::list(out, &services.list_reviews(plugin).await?),
        ReviewsCommand::Restore { review, reason } => {
            let review = services
                .restore_review(review, reason.as_deref(), cid)
                .await?;
            match out {
                OutputFormat::Json => println!("{}", review.json()),
                OutputFormat::Table => output::list(out, std::slice::from_ref(&review)),
            }
        }
    }
    Ok(())
}

impl Render for RunnerPool {
    fn json(&self) -> Value {
        json!({ "id": self.id, "workspaceId": self.workspace_id, "name": self.name,
                "createdAt": Timestamp::new(self.created_at), "deletedAt": self.deleted_at.map(Timestamp::new) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "WORKSPACE", "NAME", "DELETED"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.workspace_id.to_string(),
            self.name.clone(),
            self.deleted_at
                .map(|t| Timestamp::new(t).to_string())
                .unwrap_or_default(),
        ]
    }
}

impl Render for Workflow {
    fn json(&self) -> Value {
        json!({ "id": self.id, "workspaceId": self.workspace_id, "name": self.name, "createdAt": Timestamp::new(self.created_at) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "WORKSPACE", "NAME", "CREATED"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.workspace_id.to_string(),
            self.name.clone(),
            Timestamp::new(self.created_at).to_string(),
        ]
    }
}

impl Render for WorkflowRevision {
    fn json(&self) -> Value {
        json!({ "id": self.id, "workflowId": self.workflow_id, "number": self.number,
                "state": self.state.as_str(), "createdAt": Timestamp::new(self.created_at),
                "decidedBy": self.decided_by, "decidedAt": self.decided_at.map(Timestamp::new),
                "decisionReason": self.decision_reason })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "WORKFLOW", "NUMBER", "STATE"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.workflow_id.to_string(),
            self.number.to_string(),
            self.state.as_str().to_owned(),
        ]
    }
}

impl Render for Plugin {
    fn json(&self) -> Value {
        json!({ "id": self.id, "organisationId": self.organisation_id, "name": self.name, "createdAt": Timestamp::new(self.created_at) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "PUBLISHER", "NAME", "CREATED"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.organisation_id.to_string(),
            self.name.clone(),
            Timestamp::new(self.created_at).to_string(),
        ]
    }
}

impl Render for Review {
    fn json(&self) -> Value {
        json!({ "id": self.id, "pluginId": self.plugin_id, "authorId": self.author_id,
                "rating": self.rating, "title": self.title, "status": self.status.as_str(),
                "reasons": self.reasons, "labels": self.labels, "updatedAt": Timestamp::new(self.updated_at) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "AUTHOR", "RATING", "STATUS", "TITLE"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.author_id.to_string(),
            self.rating.to_string(),
            self.status.as_str().to_owned(),
            self.title.clone(),
        ]
    }
}

#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// A webhook delivery: its state, its command's, when the next attempt is due, and every
    /// attempt (runner, URL, status, latency, error).
    Show { id: Uuid },
}

pub async fn deliveries(
    services: &Services,
    out: OutputFormat,
    command: DeliveriesCommand,
) -> anyhow::Result<()> {
    let DeliveriesCommand::Show { id } = command;
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
