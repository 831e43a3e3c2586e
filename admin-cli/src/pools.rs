//! `cpctl pools`: runner pools of a workspace.

use clap::Subcommand;
use serde_json::{Value, json};
use uuid::Uuid;

use control_plane::domain::{CorrelationId, Timestamp};
use control_plane::service::Services;
use control_plane::storage::RunnerPool;

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
