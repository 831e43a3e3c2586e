//! `cpctl workflows`: workflows, their revisions, and deciding an approval request, over the
//! admin API. The decider is the calling token's user, who must administer the revision's
//! organisation; `--org` defaults to the token's organisation.

use clap::Subcommand;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::cli::OutputFormat;
use crate::output::{self, Cell, Column};
use crate::remote::Client;

const WORKFLOW: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("WORKSPACE", "workspaceId", Cell::Text),
    ("NAME", "name", Cell::Text),
    ("CREATED", "createdAt", Cell::Text),
];
const REVISION: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("WORKFLOW", "workflowId", Cell::Text),
    ("NUMBER", "number", Cell::Text),
    ("STATE", "state", Cell::Text),
    ("DECIDED BY", "decidedBy", Cell::Text),
];

#[derive(Debug, Subcommand)]
pub enum WorkflowsCommand {
    Create {
        #[arg(long)]
        workspace: Uuid,
        name: String,
        /// The organisation (default: the token's).
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// A workspace's workflows; without `--workspace`, every workspace's of the organisation.
    List {
        #[arg(long)]
        workspace: Option<Uuid>,
        #[arg(long)]
        org: Option<Uuid>,
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
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// Approve a revision that is `pending_approval`, as the token's user, an administrator of
    /// its organisation (audited as `workflow_revision.approved`).
    Approve(DecideArgs),
    /// Reject a revision that is `pending_approval`, as the token's user, an administrator of
    /// its organisation (audited as `workflow_revision.rejected`).
    Reject(DecideArgs),
}

#[derive(Debug, clap::Args)]
pub struct DecideArgs {
    /// The revision's workflow.
    #[arg(long)]
    pub workflow: Uuid,
    #[arg(long)]
    pub revision: Uuid,
    /// Why (1 to 1000 characters), kept in the audit event.
    #[arg(long)]
    pub reason: String,
    #[arg(long)]
    pub org: Option<Uuid>,
}

pub async fn run(
    client: &Client,
    out: OutputFormat,
    command: WorkflowsCommand,
) -> anyhow::Result<()> {
    let org = match &command {
        WorkflowsCommand::Create { org, .. }
        | WorkflowsCommand::List { org, .. }
        | WorkflowsCommand::Revisions(RevisionsCommand::Create { org, .. })
        | WorkflowsCommand::Revisions(
            RevisionsCommand::Approve(DecideArgs { org, .. })
            | RevisionsCommand::Reject(DecideArgs { org, .. }),
        ) => *org,
    };
    let base = format!("/v1/organisations/{}", client.organisation(org).await?);
    match command {
        WorkflowsCommand::Create {
            workspace, name, ..
        } => {
            let path = format!("{base}/workspaces/{workspace}/workflows");
            let body = client.post(&path, json!({ "name": name })).await?;
            output::created_value(out, &body["workflow"]);
        }
        WorkflowsCommand::List { workspace, .. } => {
            let workspaces = match workspace {
                Some(w) => vec![w.to_string()],
                None => client
                    .get_all(&format!("{base}/workspaces"), &[])
                    .await?
                    .iter()
                    .filter_map(|w| w["id"].as_str().map(str::to_owned))
                    .collect(),
            };
            let mut all = Vec::new();
            for w in workspaces {
                let path = format!("{base}/workspaces/{w}/workflows");
                all.extend(client.get_all(&path, &[]).await?);
            }
            output::rows(out, WORKFLOW, &all);
        }
        WorkflowsCommand::Revisions(RevisionsCommand::Create { workflow, .. }) => {
            let path = format!("{base}/workflows/{workflow}/revisions");
            let body = client.post(&path, json!({})).await?;
            output::created_value(out, &body["revision"]);
        }
        WorkflowsCommand::Revisions(RevisionsCommand::Approve(args)) => {
            decide(client, out, &base, "approve", args).await?
        }
        WorkflowsCommand::Revisions(RevisionsCommand::Reject(args)) => {
            decide(client, out, &base, "reject", args).await?
        }
    }
    Ok(())
}

async fn decide(
    client: &Client,
    out: OutputFormat,
    base: &str,
    verb: &str,
    args: DecideArgs,
) -> anyhow::Result<()> {
    let path = format!(
        "{base}/workflows/{}/revisions/{}/{verb}",
        args.workflow, args.revision
    );
    let body = client.post(&path, json!({ "reason": args.reason })).await?;
    let revision: &Value = &body["revision"];
    match out {
        OutputFormat::Json => println!("{revision}"),
        OutputFormat::Table => output::rows(out, REVISION, std::slice::from_ref(revision)),
    }
    Ok(())
}
