//! `cpctl workflows`: workflows, their revisions, and deciding an approval request as a named
//! administrator.

use clap::Subcommand;
use serde_json::{Value, json};
use uuid::Uuid;

use control_plane::domain::{CorrelationId, RevisionState, Timestamp};
use control_plane::service::{Services, UserRef};
use control_plane::storage::{Workflow, WorkflowRevision};

use crate::cli::OutputFormat;
use crate::output::{self, Render};

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
