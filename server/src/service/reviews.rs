//! Marketplace plugins and their reviews and reports, moderated by the active moderation
//! policy. An organisation's admin creates and lists the plugins its organisation publishes and
//! lists and restores their reviews over the admin API; another organisation's plugin is the
//! same 404 as one that does not exist.

use serde_json::json;
use uuid::Uuid;

use super::admin::{event_by, parse_name};
use super::directory::{AdminPage, Paged};
use super::{Operation, Permission, ServiceError, Services};
use crate::domain::{
    CorrelationId, FieldError, NewAuditEvent, Principal, ReportReason, ReviewStatus,
    ValidationErrors, bounded_integer, parse_uuid,
};
use crate::policy::{ModerationInput, ReportInput, Verdict};
use crate::storage::{
    ModerationBasis, Plugin, Report, ReportOutcome, RestoreOutcome, Review, ReviewModeration,
    WriteContext,
};

/// How many times a report or a restore is decided again when the review changed meanwhile
/// (each retry follows a change that committed, so this bounds the concurrent reports of one
/// review a request can lose to before it answers 503).
const MODERATION_ATTEMPTS: usize = 32;

/// `PUT .../reviews/me` body.
#[derive(Debug, Clone)]
pub struct ReviewInput {
    pub rating: u8,
    pub title: String,
    pub body: String,
}

impl ReviewInput {
    pub const MAX_TITLE: usize = 120;
    pub const MAX_BODY: usize = 5000;
    pub const MIN_RATING: i64 = 1;
    pub const MAX_RATING: i64 = 5;

    pub fn parse_rating(n: i64) -> Result<u8, String> {
        bounded_integer(n, Self::MIN_RATING, Self::MAX_RATING).map(|n| n as u8)
    }
}

/// `POST .../report` body.
#[derive(Debug, Clone)]
pub struct ReportReviewInput {
    pub reason: ReportReason,
    pub comment: Option<String>,
}

impl ReportReviewInput {
    pub const MAX_COMMENT: usize = 1000;
}

/// A review and the moderator's decision on it.
#[derive(Debug, Clone)]
pub struct ModeratedReview {
    pub review: Review,
    pub decision: &'static str,
}

fn status_of(verdict: Verdict) -> ReviewStatus {
    match verdict {
        Verdict::Publish => ReviewStatus::Published,
        Verdict::Hold => ReviewStatus::Held,
        Verdict::Reject => ReviewStatus::Rejected,
        Verdict::Hide => ReviewStatus::Hidden,
    }
}

/// The decision word shown to clients: `publish`, `hold`, `reject` or `hide`.
pub fn decision_of(status: ReviewStatus) -> &'static str {
    match status {
        ReviewStatus::Published => "publish",
        ReviewStatus::Held => "hold",
        ReviewStatus::Rejected => "reject",
        ReviewStatus::Hidden => "hide",
    }
}

fn report_input(r: &Report) -> ReportInput {
    ReportInput {
        reporter_id: r.reporter_id.to_string(),
        reason: r.reason.as_str().to_owned(),
        comment: r.comment.clone(),
    }
}

fn marketplace_event(
    write: &WriteContext,
    principal: &Principal,
    event_type: &'static str,
    target_kind: &'static str,
    target_id: Uuid,
    data: serde_json::Value,
) -> NewAuditEvent {
    // The marketplace belongs to no workspace: an organisation-level event of the actor's.
    NewAuditEvent {
        organisation_id: principal.organisation_id,
        workspace_id: None,
        event_type,
        actor: write.actor(),
        target_kind,
        target_id,
        correlation_id: write.correlation_id().to_string(),
        occurred_at: Services::now(),
        data,
    }
}

impl Services {
    pub async fn create_plugin(
        &self,
        organisation_id: Uuid,
        name: &str,
        write: &WriteContext,
    ) -> Result<Plugin, ServiceError> {
        let plugin = Plugin {
            id: Uuid::new_v4(),
            organisation_id,
            name: parse_name("name", name)?,
            created_at: Self::now(),
        };
        let event = event_by(
            write,
            organisation_id,
            None,
            "plugin.created",
            "plugin",
            plugin.id,
            json!({ "name": plugin.name }),
        );
        self.store
            .create_plugin(write, &plugin, &event)
            .await
            .map_err(super::admin::already_exists(format!(
                "a plugin named {:?} already exists",
                plugin.name
            )))?;
        Ok(plugin)
    }

    pub async fn list_reviews(&self, plugin_id: Uuid) -> Result<Vec<Review>, ServiceError> {
        Ok(self.store.list_reviews(plugin_id).await?)
    }

    /// `organisation` is the one whose review or report it is: decision slots go to
    /// organisations in turn.
    async fn moderate(
        &self,
        input: &ModerationInput,
        organisation: Uuid,
        cid: &CorrelationId,
    ) -> crate::policy::ModerationOutcome {
        match &self.policies {
            Some(runtime) => runtime.moderate(input, organisation, Some(cid)).await,
            // No policy engine: nothing is published unseen.
            None => crate::policy::ModerationOutcome {
                verdict: Verdict::Hold,
                reasons: vec!["no moderation policy is loaded; held for review".into()],
                labels: vec![],
            },
        }
    }

    /// Creates or replaces the caller's review of a plugin; the active moderator decides its
    /// status.
    pub async fn put_review(
        &self,
        principal: &Principal,
        plugin: &str,
        input: ReviewInput,
        write: &WriteContext,
    ) -> Result<ModeratedReview, ServiceError> {
        self.authorize_permission(principal, &Permission::WriteReview { plugin })
            .await?;
        let not_found = || ServiceError::not_found("no such plugin");
        let plugin_id = parse_uuid(plugin).ok_or_else(not_found)?;
        self.store
            .get_plugin(plugin_id)
            .await?
            .ok_or_else(not_found)?;
        let existing = self
            .store
            .find_review_by_author(plugin_id, principal.user_id)
            .await?;
        let id = existing.as_ref().map_or_else(Uuid::new_v4, |r| r.id);
        let prior = match &existing {
            Some(r) => self.store.list_reports(r.id).await?,
            None => vec![],
        };
        let outcome = self
            .moderate(
                &ModerationInput {
                    review_id: id.to_string(),
                    plugin_id: plugin_id.to_string(),
                    author_id: principal.user_id.to_string(),
                    rating: input.rating,
                    title: input.title.clone(),
                    body: input.body.clone(),
                    report: None,
                    prior_reports: prior.iter().map(report_input).collect(),
                    blocklist: self.settings.moderation_blocklist.clone(),
                },
                principal.organisation_id,
                write.correlation_id(),
            )
            .await;
        let now = Self::now();
        let status = status_of(outcome.verdict);
        let review = Review {
            id,
            plugin_id,
            author_id: principal.user_id,
            organisation_id: principal.organisation_id,
            rating: input.rating,
            title: input.title,
            body: input.body,
            status,
            reasons: outcome.reasons,
            labels: outcome.labels,
            created_at: existing.as_ref().map_or(now, |r| r.created_at),
            updated_at: now,
        };
        let event = marketplace_event(
            write,
            principal,
            if existing.is_some() {
                "review.replaced"
            } else {
                "review.created"
            },
            "review",
            id,
            json!({ "pluginId": plugin_id, "rating": review.rating, "status": status.as_str() }),
        );
        let review = self.store.upsert_review(write, &review, &event).await?;
        Ok(ModeratedReview {
            decision: decision_of(review.status),
            review,
        })
    }

    /// Reports another user's published review, once; the moderator decides whether it is
    /// hidden.
    pub async fn report_review(
        &self,
        principal: &Principal,
        plugin: &str,
        review: &str,
        input: ReportReviewInput,
        write: &WriteContext,
    ) -> Result<(Report, Review), ServiceError> {
        self.authorize_permission(principal, &Permission::ReportReview { plugin, review })
            .await?;
        let not_found = || ServiceError::not_found("no such review of this plugin");
        let (plugin_id, review_id) = parse_uuid(plugin)
            .zip(parse_uuid(review))
            .ok_or_else(not_found)?;
        let already = || ServiceError::Conflict {
            code: "already_reported",
            message: "you have already reported this review".into(),
            details: None,
        };
        let report = Report {
            id: Uuid::new_v4(),
            review_id,
            reporter_id: principal.user_id,
            reason: input.reason,
            comment: input.comment,
            created_at: Self::now(),
        };
        // The moderator decides on the review and every report before this one; the store
        // applies the decision only if that is still what the review has, else it is decided
        // again on what is there now.
        for _ in 0..MODERATION_ATTEMPTS {
            let current = self
                .store
                .find_review(review_id)
                .await?
                .filter(|r| r.plugin_id == plugin_id)
                .ok_or_else(not_found)?;
            if current.author_id == principal.user_id {
                return Err(ServiceError::forbidden(
                    "one cannot report one's own review",
                ));
            }
            let prior = self.store.list_reports(review_id).await?;
            if prior.iter().any(|r| r.reporter_id == principal.user_id) {
                return Err(already());
            }
            // Held, rejected or hidden, a review is shown to its author alone: anyone else
            // gets what a random id gets, or the answer would tell them its status.
            if current.status != ReviewStatus::Published {
                return Err(not_found());
            }
            let outcome = self
                .moderate(
                    &ModerationInput {
                        review_id: review_id.to_string(),
                        plugin_id: plugin_id.to_string(),
                        author_id: current.author_id.to_string(),
                        rating: current.rating,
                        title: current.title.clone(),
                        body: current.body.clone(),
                        report: Some(report_input(&report)),
                        prior_reports: prior.iter().map(report_input).collect(),
                        blocklist: self.settings.moderation_blocklist.clone(),
                    },
                    // The reporter's turn: a flood of reports is theirs.
                    principal.organisation_id,
                    write.correlation_id(),
                )
                .await;
            // A report can hide or hold the (published) review; a publish leaves it as it is,
            // with its reasons and labels.
            let moderation = match outcome.verdict {
                Verdict::Publish => ReviewModeration {
                    status: current.status,
                    reasons: current.reasons.clone(),
                    labels: current.labels.clone(),
                },
                verdict => ReviewModeration {
                    status: status_of(verdict),
                    reasons: outcome.reasons,
                    labels: outcome.labels,
                },
            };
            let event = marketplace_event(
                write,
                principal,
                "review.reported",
                "review",
                review_id,
                json!({
                    "pluginId": plugin_id,
                    "reportId": report.id,
                    "reason": report.reason.as_str(),
                    "status": moderation.status.as_str(),
                }),
            );
            let basis = ModerationBasis {
                reports: prior.len(),
                status: current.status,
                updated_at: current.updated_at,
            };
            match self
                .store
                .insert_report(write, &report, &moderation, &basis, &event)
                .await?
            {
                ReportOutcome::Stored(review) => return Ok((report, review)),
                ReportOutcome::AlreadyReported => return Err(already()),
                ReportOutcome::Stale => continue,
            }
        }
        tracing::warn!(%review_id, "a report lost every attempt to concurrent changes");
        Err(ServiceError::Unavailable)
    }

    /// `cpctl reviews restore`: an administrator's decision that a review hidden after reports
    /// should not be. Its reports are dismissed (deleted; the audit log keeps each
    /// `review.reported`) and the moderator decides again on its content alone, so a review
    /// whose content it would hold or reject is restored as held or rejected. Audited in the
    /// log of the plugin's organisation, whose administrator decides.
    pub async fn restore_review(
        &self,
        review_id: Uuid,
        reason: Option<&str>,
        write: &WriteContext,
    ) -> Result<Review, ServiceError> {
        let reason = reason
            .map(|r| crate::domain::bounded_text(r, RESTORE_REASON_MAX))
            .transpose()
            .map_err(|reason| ValidationErrors::from(FieldError::new("reason", reason)))?;
        let not_found = || ServiceError::not_found("no such review");
        for _ in 0..MODERATION_ATTEMPTS {
            let current = self
                .store
                .find_review(review_id)
                .await?
                .ok_or_else(not_found)?;
            let plugin = self
                .store
                .get_plugin(current.plugin_id)
                .await?
                .ok_or_else(not_found)?;
            let outcome = self
                .moderate(
                    &ModerationInput {
                        review_id: review_id.to_string(),
                        plugin_id: current.plugin_id.to_string(),
                        author_id: current.author_id.to_string(),
                        rating: current.rating,
                        title: current.title.clone(),
                        body: current.body.clone(),
                        report: None,
                        prior_reports: vec![],
                        blocklist: self.settings.moderation_blocklist.clone(),
                    },
                    current.organisation_id,
                    write.correlation_id(),
                )
                .await;
            let moderation = ReviewModeration {
                status: status_of(outcome.verdict),
                reasons: outcome.reasons,
                labels: outcome.labels,
            };
            let event = event_by(
                write,
                plugin.organisation_id,
                None,
                "review.restored",
                "review",
                review_id,
                json!({
                    "pluginId": current.plugin_id,
                    "reason": reason,
                    "status": moderation.status.as_str(),
                }),
            );
            let basis = ModerationBasis {
                reports: 0,
                status: current.status,
                updated_at: current.updated_at,
            };
            match self
                .store
                .restore_review(write, review_id, &moderation, &basis, Self::now(), &event)
                .await?
            {
                RestoreOutcome::Restored { review, .. } => return Ok(review),
                RestoreOutcome::NotFound => return Err(not_found()),
                RestoreOutcome::NotHidden(status) => {
                    return Err(ServiceError::Conflict {
                        code: "invalid_transition",
                        message: format!(
                            "only a hidden review can be restored; this one is {status}"
                        ),
                        details: Some(json!({ "status": status.as_str() })),
                    });
                }
                RestoreOutcome::Stale => continue,
            }
        }
        Err(ServiceError::Unavailable)
    }
}

/// The admin API's marketplace operations: the authorizer decides, then the plugin must be one
/// the route's organisation publishes.
impl Services {
    /// The plugin the route names, which its organisation must publish.
    async fn plugin_of(&self, organisation_id: Uuid, plugin: &str) -> Result<Plugin, ServiceError> {
        let missing = || ServiceError::not_found("no such plugin in this organisation");
        let id = parse_uuid(plugin).ok_or_else(missing)?;
        self.store
            .get_plugin(id)
            .await?
            .filter(|p| p.organisation_id == organisation_id)
            .ok_or_else(missing)
    }

    pub async fn admin_create_plugin(
        &self,
        principal: &Principal,
        organisation: &str,
        name: &str,
        write: &WriteContext,
    ) -> Result<Plugin, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::CreatePlugin, organisation, None)
            .await?;
        self.create_plugin(org, name, write).await
    }

    pub async fn admin_list_plugins(
        &self,
        principal: &Principal,
        organisation: &str,
        page: AdminPage,
    ) -> Result<Paged<Plugin>, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::ListPlugins, organisation, None)
            .await?;
        let rows = self
            .store
            .plugins_page(org, page.after(), page.fetch())
            .await?;
        Ok(page.of(rows, |p| p.id))
    }

    /// Every review of the plugin, whatever its status (held and hidden ones included).
    pub async fn admin_list_reviews(
        &self,
        principal: &Principal,
        organisation: &str,
        plugin: &str,
        page: AdminPage,
    ) -> Result<Paged<Review>, ServiceError> {
        let operation = Operation::ListPluginReviews;
        let org = self
            .admit_admin(principal, operation, organisation, Some(plugin))
            .await?;
        let plugin = self.plugin_of(org, plugin).await?;
        let rows = self
            .store
            .reviews_page(plugin.id, page.after(), page.fetch())
            .await?;
        Ok(page.of(rows, |r| r.id))
    }

    pub async fn admin_restore_review(
        &self,
        principal: &Principal,
        organisation: &str,
        plugin: &str,
        review: &str,
        reason: Option<&str>,
        write: &WriteContext,
    ) -> Result<Review, ServiceError> {
        let operation = Operation::RestorePluginReview;
        let org = self
            .admit_admin(principal, operation, organisation, Some(plugin))
            .await?;
        let plugin = self.plugin_of(org, plugin).await?;
        let missing = || ServiceError::not_found("no such review of this plugin");
        let review_id = parse_uuid(review).ok_or_else(missing)?;
        self.store
            .find_review(review_id)
            .await?
            .filter(|r| r.plugin_id == plugin.id)
            .ok_or_else(missing)?;
        self.restore_review(review_id, reason, write).await
    }
}

/// The longest `--reason` of `cpctl reviews restore`.
pub const RESTORE_REASON_MAX: usize = 500;
