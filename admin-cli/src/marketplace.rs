//! `cpctl plugins|reviews`: marketplace plugins and the moderation of their reviews.

use clap::Subcommand;
use serde_json::{Value, json};
use uuid::Uuid;

use control_plane::domain::{CorrelationId, Timestamp};
use control_plane::service::Services;
use control_plane::storage::{Plugin, Review};

use crate::cli::OutputFormat;
use crate::output::{self, Render};

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
