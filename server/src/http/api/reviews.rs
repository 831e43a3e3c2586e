//! PUT /v1/marketplace/plugins/{pluginId}/reviews/me and
//! POST /v1/marketplace/plugins/{pluginId}/reviews/{reviewId}/report

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use crate::domain::Operation;
use crate::domain::{ReportReason, ReviewStatus, Timestamp, ValidationErrors};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::error_responses;
use crate::http::fields::{Rating, Text, request_body};
use crate::http::idempotency::{Idempotent, Permitted, path_id};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{ModeratedReview, Permission, ReportReviewInput, ReviewInput, Services};

request_body! {
    /// Request body of a review.
    pub struct PluginReviewInput {
        "rating" => rating: required Rating,
        "title" => title: required Text<{ ReviewInput::MAX_TITLE }>,
        "body" => body: required Text<{ ReviewInput::MAX_BODY }>,
    }
}

impl FromJson for ReviewInput {
    type Body = PluginReviewInput;

    fn from_body(body: PluginReviewInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            rating: body.rating.0,
            title: body.title.0,
            body: body.body.0,
        })
    }
}

request_body! {
    /// Request body of a report.
    pub struct ReviewReportInput {
        "reason" => reason: required ReportReason,
        "comment" => comment: optional Text<{ ReportReviewInput::MAX_COMMENT }>,
    }
}

impl FromJson for ReportReviewInput {
    type Body = ReviewReportInput;

    fn from_body(body: ReviewReportInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            reason: body.reason,
            comment: body.comment.map(|c| c.0),
        })
    }
}

#[derive(Object)]
pub struct ModerationBody {
    /// `publish`, `hold`, `reject` or `hide`, as the moderation policy decided.
    decision: String,
    /// Why, in the policy's words.
    reasons: Vec<String>,
}

#[derive(Object)]
#[oai(rename = "PluginReview", rename_all = "camelCase")]
pub struct PluginReviewBody {
    id: Uuid,
    plugin_id: Uuid,
    rating: u8,
    title: String,
    body: String,
    /// `published`, `held`, `rejected` or `hidden`.
    status: ReviewStatus,
    moderation: ModerationBody,
    created_at: Timestamp,
    updated_at: Timestamp,
}

#[derive(Object)]
pub struct PluginReviewEnvelope {
    review: PluginReviewBody,
}

impl From<ModeratedReview> for PluginReviewBody {
    fn from(m: ModeratedReview) -> Self {
        let r = m.review;
        Self {
            id: r.id,
            plugin_id: r.plugin_id,
            rating: r.rating,
            title: r.title,
            body: r.body,
            status: r.status,
            moderation: ModerationBody {
                decision: m.decision.to_owned(),
                reasons: r.reasons,
            },
            created_at: r.created_at.into(),
            updated_at: r.updated_at.into(),
        }
    }
}

#[derive(Object)]
#[oai(rename = "ReviewReport", rename_all = "camelCase")]
pub struct ReviewReportBody {
    id: Uuid,
    review_id: Uuid,
    reason: String,
    created_at: Timestamp,
}

#[derive(Object)]
#[oai(rename = "ReportedReview")]
pub struct ReportedReviewBody {
    id: Uuid,
    /// The review's status after the moderator saw the report.
    status: String,
}

#[derive(Object)]
pub struct ReviewReportEnvelope {
    report: ReviewReportBody,
    review: ReportedReviewBody,
}

#[derive(ApiResponse)]
pub enum PutReviewResponse {
    /// The review is stored with the moderator's decision.
    #[oai(status = 200)]
    Ok(Json<PluginReviewEnvelope>),
}

#[derive(ApiResponse)]
pub enum ReportReviewResponse {
    /// The report is recorded.
    #[oai(status = 200)]
    Ok(Json<ReviewReportEnvelope>),
}

error_responses!(PutReviewErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);
error_responses!(ReportReviewErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

impl Permitted for ReviewInput {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        Permission::WriteReview {
            plugin: path_id(req, "pluginId"),
        }
    }
}

impl Permitted for ReportReviewInput {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        Permission::ReportReview {
            plugin: path_id(req, "pluginId"),
            review: path_id(req, "reviewId"),
        }
    }
}

fn write_review(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::WriteReview, ep)
}

fn report_review(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ReportReview, ep)
}

pub struct ReviewsApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Marketplace")]
impl ReviewsApi {
    /// Create or replace the caller's own review of a plugin
    ///
    /// Requires `reviews:write`. One review per user per plugin: a second PUT replaces it. The
    /// active moderation policy decides its status; the response says the decision and why. A
    /// review hidden after reports stays `hidden` when replaced (its content changes); only an
    /// administrator restores it.
    #[oai(
        path = "/marketplace/plugins/:pluginId/reviews/me",
        method = "put",
        operation_id = "putOwnPluginReview",
        transform = "write_review"
    )]
    async fn put_own_review(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "pluginId")] plugin_id: Path<String>,
        body: Idempotent<JsonBody<ReviewInput>>,
    ) -> Result<PutReviewResponse, PutReviewErrors> {
        let review = services
            .put_review(&auth.0, &plugin_id, body.input.value, &body.write)
            .await?;
        let envelope = PluginReviewEnvelope {
            review: review.into(),
        };
        Ok(PutReviewResponse::Ok(Json(envelope)))
    }

    /// Report a plugin review
    ///
    /// Requires `reviews:report`. One report per user per review (409 `already_reported`); 403
    /// for one's own review. Only a published review can be reported: a held, rejected or
    /// hidden one is shown to its author alone, and anyone else gets the 404 of an unknown id.
    /// The moderation policy decides whether the review is hidden (by default after reports
    /// from three distinct users).
    #[oai(
        path = "/marketplace/plugins/:pluginId/reviews/:reviewId/report",
        method = "post",
        operation_id = "reportPluginReview",
        transform = "report_review"
    )]
    async fn report_review(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "pluginId")] plugin_id: Path<String>,
        #[oai(name = "reviewId")] review_id: Path<String>,
        body: Idempotent<JsonBody<ReportReviewInput>>,
    ) -> Result<ReportReviewResponse, ReportReviewErrors> {
        let (report, review) = services
            .report_review(
                &auth.0,
                &plugin_id,
                &review_id,
                body.input.value,
                &body.write,
            )
            .await?;
        let envelope = ReviewReportEnvelope {
            report: ReviewReportBody {
                id: report.id,
                review_id: report.review_id,
                reason: report.reason.as_str().to_owned(),
                created_at: report.created_at.into(),
            },
            review: ReportedReviewBody {
                id: review.id,
                status: review.status.as_str().to_owned(),
            },
        };
        Ok(ReportReviewResponse::Ok(Json(envelope)))
    }
}
