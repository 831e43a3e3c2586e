//! `cpctl plugins|reviews`: the plugins an organisation publishes and the moderation of their
//! reviews, over the admin API. `--org` defaults to the calling token's organisation; another
//! organisation's plugin is a 404.

use clap::Subcommand;
use serde_json::json;
use uuid::Uuid;

use crate::cli::OutputFormat;
use crate::output::{self, Cell, Column};
use crate::remote::Client;

const PLUGIN: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("PUBLISHER", "organisationId", Cell::Text),
    ("NAME", "name", Cell::Text),
    ("CREATED", "createdAt", Cell::Text),
];
const REVIEW: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("AUTHOR", "authorId", Cell::Text),
    ("RATING", "rating", Cell::Text),
    ("STATUS", "status", Cell::Text),
    ("TITLE", "title", Cell::Text),
];

#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    Create {
        /// The publishing organisation (default: the token's).
        #[arg(long)]
        org: Option<Uuid>,
        name: String,
    },
    /// The plugins the organisation publishes.
    List {
        #[arg(long)]
        org: Option<Uuid>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ReviewsCommand {
    /// Every review of a plugin the organisation publishes, held and hidden ones included.
    List {
        #[arg(long)]
        plugin: Uuid,
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// Restores a review hidden after reports: its reports are dismissed and the moderator
    /// decides again on its content alone (audited as `review.restored`).
    Restore {
        /// The reviewed plugin.
        #[arg(long)]
        plugin: Uuid,
        #[arg(long)]
        review: Uuid,
        /// Why (1 to 500 characters), kept in the audit event.
        #[arg(long)]
        reason: Option<String>,
        #[arg(long)]
        org: Option<Uuid>,
    },
}

fn plugins_path(org: &str) -> String {
    format!("/v1/organisations/{org}/plugins")
}

pub async fn plugins(
    client: &Client,
    out: OutputFormat,
    command: PluginsCommand,
) -> anyhow::Result<()> {
    match command {
        PluginsCommand::Create { org, name } => {
            let path = plugins_path(&client.organisation(org).await?);
            let body = client.post(&path, json!({ "name": name })).await?;
            output::created_value(out, &body["plugin"]);
        }
        PluginsCommand::List { org } => {
            let path = plugins_path(&client.organisation(org).await?);
            output::rows(out, PLUGIN, &client.get_all(&path, &[]).await?);
        }
    }
    Ok(())
}

pub async fn reviews(
    client: &Client,
    out: OutputFormat,
    command: ReviewsCommand,
) -> anyhow::Result<()> {
    match command {
        ReviewsCommand::List { plugin, org } => {
            let path = format!(
                "{}/{plugin}/reviews",
                plugins_path(&client.organisation(org).await?)
            );
            output::rows(out, REVIEW, &client.get_all(&path, &[]).await?);
        }
        ReviewsCommand::Restore {
            plugin,
            review,
            reason,
            org,
        } => {
            let path = format!(
                "{}/{plugin}/reviews/{review}/restore",
                plugins_path(&client.organisation(org).await?)
            );
            let body = match reason {
                Some(reason) => json!({ "reason": reason }),
                None => json!({}),
            };
            let body = client.post(&path, body).await?;
            let review = &body["review"];
            match out {
                OutputFormat::Json => println!("{review}"),
                OutputFormat::Table => output::rows(out, REVIEW, std::slice::from_ref(review)),
            }
        }
    }
    Ok(())
}
