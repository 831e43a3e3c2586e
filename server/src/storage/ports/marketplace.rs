//! Marketplace plugins, their reviews and the reports on reviews.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::NewAuditEvent;
use crate::storage::StoreError;

#[derive(Debug, Clone, PartialEq)]
pub struct Plugin {
    pub id: Uuid,
    pub organisation_id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Review {
    pub id: Uuid,
    pub plugin_id: Uuid,
    pub author_id: Uuid,
    pub organisation_id: Uuid,
    pub rating: u8,
    pub title: String,
    pub body: String,
    pub status: crate::domain::ReviewStatus,
    pub reasons: Vec<String>,
    pub labels: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub id: Uuid,
    pub review_id: Uuid,
    pub reporter_id: Uuid,
    pub reason: crate::domain::ReportReason,
    pub comment: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A moderation decision to store with a review.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewModeration {
    pub status: crate::domain::ReviewStatus,
    pub reasons: Vec<String>,
    pub labels: Vec<String>,
}

/// Plugins, reviews and reports.
#[async_trait]
pub trait MarketplaceStore: Send + Sync {
    async fn create_plugin(&self, plugin: &Plugin, event: &NewAuditEvent)
    -> Result<(), StoreError>;
    async fn list_plugins(&self) -> Result<Vec<Plugin>, StoreError>;
    async fn get_plugin(&self, plugin_id: Uuid) -> Result<Option<Plugin>, StoreError>;
    async fn find_review(&self, review_id: Uuid) -> Result<Option<Review>, StoreError>;
    async fn find_review_by_author(
        &self,
        plugin_id: Uuid,
        author_id: Uuid,
    ) -> Result<Option<Review>, StoreError>;
    async fn list_reviews(&self, plugin_id: Uuid) -> Result<Vec<Review>, StoreError>;
    async fn list_reports(&self, review_id: Uuid) -> Result<Vec<Report>, StoreError>;
    /// Creates the author's review of the plugin, or replaces it (keeping its id and creation
    /// time); returns the stored review.
    async fn upsert_review(
        &self,
        review: &Review,
        event: &NewAuditEvent,
    ) -> Result<Review, StoreError>;
    /// Stores the report and the review's new moderation; `None` when this reporter already
    /// reported the review.
    async fn insert_report(
        &self,
        report: &Report,
        moderation: &ReviewModeration,
        event: &NewAuditEvent,
    ) -> Result<Option<Review>, StoreError>;
}
