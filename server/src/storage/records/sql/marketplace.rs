//! Plugins, reviews and reports (shared by both SQL adapters; see the layout in `storage/mod.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use super::{List, ListParam};
use crate::domain::{NewAuditEvent, ReportReason, ReviewStatus, rules};
use crate::storage::records::dialect::{Conn, Dialect};
use crate::storage::records::rows::{PluginRow, parse_state, with_data};
use crate::storage::{
    MarketplaceStore, ModerationBasis, Plugin, Report, ReportOutcome, RestoreOutcome, Review,
    ReviewModeration, StoreError, WriteContext,
};

#[derive(FromRow)]
struct ReviewRow {
    id: Uuid,
    plugin_id: Uuid,
    author_id: Uuid,
    organisation_id: Uuid,
    rating: i16,
    title: String,
    body: String,
    status: String,
    reasons: List<String>,
    labels: List<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<ReviewRow> for Review {
    type Error = StoreError;
    fn try_from(r: ReviewRow) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.id,
            plugin_id: r.plugin_id,
            author_id: r.author_id,
            organisation_id: r.organisation_id,
            rating: u8::try_from(r.rating).unwrap_or(0),
            title: r.title,
            body: r.body,
            status: parse_state(&r.status, ReviewStatus::parse)?,
            reasons: r.reasons.into_vec(),
            labels: r.labels.into_vec(),
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

const REVIEW_COLUMNS: &str = "id, plugin_id, author_id, organisation_id, rating, title, body,
    status, reasons, labels, created_at, updated_at";

#[async_trait]
impl<S: Dialect> MarketplaceStore for S {
    async fn create_plugin(
        &self,
        write: &WriteContext,
        plugin: &Plugin,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query(
            "INSERT INTO plugins (id, organisation_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(plugin.id)
        .bind(plugin.organisation_id)
        .bind(&plugin.name)
        .bind(plugin.created_at)
        .execute(&mut *tx)
        .await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn list_plugins(&self) -> Result<Vec<Plugin>, StoreError> {
        let rows: Vec<PluginRow> =
            S::query("SELECT id, organisation_id, name, created_at FROM plugins ORDER BY name")
                .fetch_all(self.pool())
                .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn plugins_page(
        &self,
        organisation_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Plugin>, StoreError> {
        // Keyset on (created_at, id), as the other admin pages.
        let rows: Vec<PluginRow> = S::query(
            "SELECT id, organisation_id, name, created_at FROM plugins
             WHERE organisation_id = $1
               AND ($2 IS NULL OR (created_at, id) > (SELECT created_at, id FROM plugins WHERE id = $2))
             ORDER BY created_at, id LIMIT $3",
        )
        .bind(organisation_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn get_plugin(&self, plugin_id: Uuid) -> Result<Option<Plugin>, StoreError> {
        let row: Option<PluginRow> =
            S::query("SELECT id, organisation_id, name, created_at FROM plugins WHERE id = $1")
                .bind(plugin_id)
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(Into::into))
    }

    async fn find_review(&self, review_id: Uuid) -> Result<Option<Review>, StoreError> {
        let row: Option<ReviewRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM plugin_reviews WHERE id = $1"
        )))
        .bind(review_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn find_review_by_author(
        &self,
        plugin_id: Uuid,
        author_id: Uuid,
    ) -> Result<Option<Review>, StoreError> {
        let row: Option<ReviewRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM plugin_reviews WHERE plugin_id = $1 AND author_id = $2"
        )))
        .bind(plugin_id)
        .bind(author_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn list_reviews(&self, plugin_id: Uuid) -> Result<Vec<Review>, StoreError> {
        let rows: Vec<ReviewRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM plugin_reviews WHERE plugin_id = $1
             ORDER BY updated_at DESC"
        )))
        .bind(plugin_id)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn reviews_page(
        &self,
        plugin_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Review>, StoreError> {
        let rows: Vec<ReviewRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM plugin_reviews
             WHERE plugin_id = $1
               AND ($2 IS NULL OR (created_at, id) > (SELECT created_at, id FROM plugin_reviews WHERE id = $2))
             ORDER BY created_at, id LIMIT $3"
        )))
        .bind(plugin_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn list_reports(&self, review_id: Uuid) -> Result<Vec<Report>, StoreError> {
        let rows: Vec<(Uuid, Uuid, Uuid, String, Option<String>, DateTime<Utc>)> = S::query(
            "SELECT id, review_id, reporter_id, reason, comment, created_at
             FROM review_reports WHERE review_id = $1 ORDER BY created_at",
        )
        .bind(review_id)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter()
            .map(
                |(id, review_id, reporter_id, reason, comment, created_at)| {
                    Ok(Report {
                        id,
                        review_id,
                        reporter_id,
                        reason: parse_state(&reason, ReportReason::parse)?,
                        comment,
                        created_at,
                    })
                },
            )
            .collect()
    }

    async fn upsert_review(
        &self,
        write: &WriteContext,
        review: &Review,
        event: &NewAuditEvent,
    ) -> Result<Review, StoreError> {
        let mut tx = self.begin(write).await?;
        // Postgres: the row lock orders this against reports and restores of the review
        // (SQLite: the write lock does), so a hide cannot be lost between read and write.
        let stored: Option<(String, List<String>, List<String>)> =
            S::query(sqlx::AssertSqlSafe(format!(
                "SELECT status, reasons, labels FROM plugin_reviews
                 WHERE plugin_id = $1 AND author_id = $2 {for_update}",
                for_update = S::FOR_UPDATE
            )))
            .bind(review.plugin_id)
            .bind(review.author_id)
            .fetch_optional(&mut *tx)
            .await?;
        let mut review = review.clone();
        if let Some((status, reasons, labels)) = stored {
            let status = parse_state(&status, ReviewStatus::parse)?;
            if rules::replacement_keeps_moderation(Some(status)) {
                review.status = status;
                review.reasons = reasons.into_vec();
                review.labels = labels.into_vec();
            }
        }
        // The author's one review: a second one replaces it, keeping its id and creation time.
        let row: ReviewRow = S::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO plugin_reviews (id, plugin_id, author_id, organisation_id, rating, title,
                 body, status, reasons, labels, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
             ON CONFLICT (plugin_id, author_id) DO UPDATE SET rating = excluded.rating,
                 title = excluded.title, body = excluded.body, status = excluded.status,
                 reasons = excluded.reasons, labels = excluded.labels,
                 updated_at = excluded.updated_at
             RETURNING {REVIEW_COLUMNS}"
        )))
        .bind(review.id)
        .bind(review.plugin_id)
        .bind(review.author_id)
        .bind(review.organisation_id)
        .bind(i16::from(review.rating))
        .bind(&review.title)
        .bind(&review.body)
        .bind(review.status.as_str())
        .bind(ListParam(&review.reasons))
        .bind(ListParam(&review.labels))
        .bind(review.updated_at)
        .fetch_one(&mut *tx)
        .await?;
        let mut event = with_data(event, "status", review.status.as_str().into());
        event.target_id = row.id;
        S::insert_event(&mut tx, &event).await?;
        self.commit(tx, write).await?;
        row.try_into()
    }

    async fn insert_report(
        &self,
        write: &WriteContext,
        report: &Report,
        moderation: &ReviewModeration,
        basis: &ModerationBasis,
        event: &NewAuditEvent,
    ) -> Result<ReportOutcome, StoreError> {
        let mut tx = self.begin(write).await?;
        // Postgres: the review's row lock makes concurrent reports of it wait for each other,
        // and the count below, a statement after the lock, sees every report committed before
        // (SQLite: the write lock does both).
        if !review_is_as_read::<S>(&mut tx, report.review_id, basis).await? {
            return Ok(ReportOutcome::Stale);
        }
        // One report per reporter and review: a second one changes nothing.
        let inserted = S::query(
            "INSERT INTO review_reports (id, review_id, reporter_id, reason, comment, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (review_id, reporter_id) DO NOTHING",
        )
        .bind(report.id)
        .bind(report.review_id)
        .bind(report.reporter_id)
        .bind(report.reason.as_str())
        .bind(&report.comment)
        .bind(report.created_at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            return Ok(ReportOutcome::AlreadyReported);
        }
        let row: ReviewRow = S::query(sqlx::AssertSqlSafe(format!(
            "UPDATE plugin_reviews SET status = $2, reasons = $3, labels = $4
             WHERE id = $1 RETURNING {REVIEW_COLUMNS}"
        )))
        .bind(report.review_id)
        .bind(moderation.status.as_str())
        .bind(ListParam(&moderation.reasons))
        .bind(ListParam(&moderation.labels))
        .fetch_one(&mut *tx)
        .await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        row.try_into().map(ReportOutcome::Stored)
    }

    async fn restore_review(
        &self,
        write: &WriteContext,
        review_id: Uuid,
        moderation: &ReviewModeration,
        basis: &ModerationBasis,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<RestoreOutcome, StoreError> {
        let mut tx = self.begin(write).await?;
        let stored: Option<(String, DateTime<Utc>)> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT status, updated_at FROM plugin_reviews WHERE id = $1 {for_update}",
            for_update = S::FOR_UPDATE
        )))
        .bind(review_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((status, updated_at)) = stored else {
            return Ok(RestoreOutcome::NotFound);
        };
        let status = parse_state(&status, ReviewStatus::parse)?;
        if status != ReviewStatus::Hidden {
            return Ok(RestoreOutcome::NotHidden(status));
        }
        // The reports are about to go: only the replacement time tells a stale decision.
        if updated_at != basis.updated_at {
            return Ok(RestoreOutcome::Stale);
        }
        let dismissed = S::query("DELETE FROM review_reports WHERE review_id = $1")
            .bind(review_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let row: ReviewRow = S::query(sqlx::AssertSqlSafe(format!(
            "UPDATE plugin_reviews SET status = $2, reasons = $3, labels = $4, updated_at = $5
             WHERE id = $1 RETURNING {REVIEW_COLUMNS}"
        )))
        .bind(review_id)
        .bind(moderation.status.as_str())
        .bind(ListParam(&moderation.reasons))
        .bind(ListParam(&moderation.labels))
        .bind(at)
        .fetch_one(&mut *tx)
        .await?;
        let event = with_data(event, "dismissedReports", dismissed.into());
        S::insert_event(&mut tx, &event).await?;
        self.commit(tx, write).await?;
        Ok(RestoreOutcome::Restored {
            review: row.try_into()?,
            dismissed,
        })
    }
}

/// Locks the review's row and tells whether it is still as the decision read it.
async fn review_is_as_read<S: Dialect>(
    conn: &mut Conn<S>,
    review_id: Uuid,
    basis: &ModerationBasis,
) -> Result<bool, StoreError> {
    let stored: Option<(String, DateTime<Utc>)> = S::query(sqlx::AssertSqlSafe(format!(
        "SELECT status, updated_at FROM plugin_reviews WHERE id = $1 {for_update}",
        for_update = S::FOR_UPDATE
    )))
    .bind(review_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((status, updated_at)) = stored else {
        return Ok(false);
    };
    let status = parse_state(&status, ReviewStatus::parse)?;
    let (reports,): (i64,) = S::query("SELECT count(*) FROM review_reports WHERE review_id = $1")
        .bind(review_id)
        .fetch_one(&mut *conn)
        .await?;
    Ok(rules::moderation_is_current(
        reports, status, updated_at, basis,
    ))
}
