//! `cpctl pools`: runner pools of a workspace, over the admin API (the rules are the server's).

use clap::Subcommand;
use serde_json::json;
use uuid::Uuid;

use crate::cli::OutputFormat;
use crate::output::{self, Cell, Column};
use crate::remote::Client;

const POOL: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("WORKSPACE", "workspaceId", Cell::Text),
    ("NAME", "name", Cell::Text),
    ("DELETED", "deletedAt", Cell::Text),
];

#[derive(Debug, Subcommand)]
pub enum PoolsCommand {
    Create {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        workspace: Uuid,
        name: String,
    },
    /// A workspace's pools, deleted ones included; without --workspace, those of every
    /// workspace of the organisation.
    List {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        workspace: Option<Uuid>,
    },
}

pub async fn run(client: &Client, out: OutputFormat, command: PoolsCommand) -> anyhow::Result<()> {
    let org = match &command {
        PoolsCommand::Create { org, .. } | PoolsCommand::List { org, .. } => *org,
    };
    let base = format!("/v1/organisations/{}", client.organisation(org).await?);
    match command {
        PoolsCommand::Create {
            workspace, name, ..
        } => {
            let path = format!("{base}/workspaces/{workspace}/runner-pools");
            let body = client.post(&path, json!({ "name": name })).await?;
            output::created_value(out, &body["pool"]);
        }
        PoolsCommand::List { workspace, .. } => {
            let workspaces = match workspace {
                Some(id) => vec![id.to_string()],
                None => client
                    .get_all(&format!("{base}/workspaces"), &[])
                    .await?
                    .iter()
                    .filter_map(|w| w["id"].as_str().map(str::to_owned))
                    .collect(),
            };
            let mut all = Vec::new();
            for workspace in workspaces {
                let path = format!("{base}/workspaces/{workspace}/runner-pools");
                all.extend(client.get_all(&path, &[]).await?);
            }
            output::rows(out, POOL, &all);
        }
    }
    Ok(())
}
