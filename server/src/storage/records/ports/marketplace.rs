//! Marketplace plugins, their reviews and the reports on reviews.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{NewAuditEvent, ReviewStatus};
use crate::storage::StoreError;
use crate::storage::WriteContext;

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

/// What a moderation decision on a review was based on. The store applies the decision only if
/// the review is still as read: exactly `reports` reports, still `status`, and not replaced or
/// restored since `updated_at` (see `rules::moderation_is_current`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModerationBasis {
    pub reports: usize,
    pub status: ReviewStatus,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ReportOutcome {
    /// Stored, with the review as it now is.
    Stored(Review),
    /// This reporter already reported the review; nothing changed.
    AlreadyReported,
    /// The review changed since it was read (another report, a replacement, a restore);
    /// nothing changed: read it again and decide again.
    Stale,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RestoreOutcome {
    /// Restored; the count of reports dismissed.
    Restored { review: Review, dismissed: u64 },
    /// No review of that id.
    NotFound,
    /// The review is not hidden (its status is given); nothing changed.
    NotHidden(crate::domain::ReviewStatus),
    /// The review was replaced since it was read; nothing changed.
    Stale,
}

/// Plugins, reviews and reports.
#[async_trait]
pub trait MarketplaceStore: Send + Sync {
    async fn create_plugin(
        &self,
        write: &WriteContext,
        plugin: &Plugin,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_plugins(&self) -> Result<Vec<Plugin>, StoreError>;
    /// Up to `limit` plugins the organisation publishes, in the order they were created, after
    /// the one with id `after` (the admin API's pages).
    async fn plugins_page(
        &self,
        organisation_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Plugin>, StoreError>;
    async fn get_plugin(&self, plugin_id: Uuid) -> Result<Option<Plugin>, StoreError>;
    async fn find_review(&self, review_id: Uuid) -> Result<Option<Review>, StoreError>;
    async fn find_review_by_author(
        &self,
        plugin_id: Uuid,
        author_id: Uuid,
    ) -> Result<Option<Review>, StoreError>;
    async fn list_reviews(&self, plugin_id: Uuid) -> Result<Vec<Review>, StoreError>;
    /// Up to `limit` reviews of the plugin in the order they were created, after the one with
    /// id `after` (the admin API's pages).
    async fn reviews_page(
        &self,
        plugin_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Review>, StoreError>;
    async fn list_reports(&self, review_id: Uuid) -> Result<Vec<Report>, StoreError>;
    /// Creates the author's review of the plugin, or replaces it (keeping its id and creation
    /// time); returns the stored review. A review hidden after reports keeps its status,
    /// reasons and labels (`rules::replacement_keeps_moderation`), and the event's `status`
    /// says what was stored.
    async fn upsert_review(
        &self,
        write: &WriteContext,
        review: &Review,
        event: &NewAuditEvent,
    ) -> Result<Review, StoreError>;
    /// Stores the report and the review's new moderation, decided on `basis`: the review's
    /// row is locked and its reports counted in the transaction, so concurrent reports are
    /// decided one after another, each on every report before it.
    async fn insert_report(
        &self,
        write: &WriteContext,
        report: &Report,
        moderation: &ReviewModeration,
        basis: &ModerationBasis,
        event: &NewAuditEvent,
    ) -> Result<ReportOutcome, StoreError>;
    /// Sets a hidden review to `moderation` and deletes (dismisses) its reports, if it is
    /// still hidden and as read at `basis.updated_at`. The event's data gains
    /// `dismissedReports`.
    async fn restore_review(
        &self,
        write: &WriteContext,
        review_id: Uuid,
        moderation: &ReviewModeration,
        basis: &ModerationBasis,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<RestoreOutcome, StoreError>;
}
