//! The plugins an organisation publishes, on the admin plane: create and list them, list their
//! reviews (whatever their status) and restore a review hidden after reports. Thin: the rules
//! are `service/reviews.rs`'s.

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use super::organisations::Named;
use crate::domain::{Operation, ReviewStatus, Timestamp, ValidationErrors};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::http::fields::{Text, request_body};
use crate::http::idempotency::{Idempotent, Permitted, admin_permission};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{AdminPage, Permission, RESTORE_REASON_MAX, Services};
use crate::storage::{Plugin, Review};

type NewPlugin = Named<{ Operation::CreatePlugin as usize }>;

request_body! {
    /// Request body of restoring a review.
    pub struct RestorePluginReviewInput {
        /// Why; kept in the audit log.
        "reason" => reason: optional Text<RESTORE_REASON_MAX>,
    }
}

#[derive(Debug)]
pub struct Restore(pub(super) Option<String>);

impl FromJson for Restore {
    type Body = RestorePluginReviewInput;

    fn from_body(body: RestorePluginReviewInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.reason.map(|r| r.0)))
    }
}

impl Permitted for Restore {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::RestorePluginReview, req)
    }
}

#[derive(Object)]
#[oai(rename = "Plugin", rename_all = "camelCase")]
pub struct PluginBody {
    id: Uuid,
    /// The publishing organisation.
    organisation_id: Uuid,
    name: String,
    created_at: Timestamp,
}

impl From<Plugin> for PluginBody {
    fn from(p: Plugin) -> Self {
        Self {
            id: p.id,
            organisation_id: p.organisation_id,
            name: p.name,
            created_at: p.created_at.into(),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct PluginEnvelope {
    plugin: PluginBody,
}

#[derive(Object)]
#[oai(rename = "PluginPage", rename_all = "camelCase")]
pub struct PluginPageBody {
    /// In the order the plugins were created.
    items: Vec<PluginBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

/// A review as the publishing organisation's administrator sees it, whatever its status.
#[derive(Object)]
#[oai(rename = "PluginReviewDetail", rename_all = "camelCase")]
pub struct ReviewDetailBody {
    id: Uuid,
    plugin_id: Uuid,
    author_id: Uuid,
    rating: u8,
    title: String,
    body: String,
    /// `published`, `held`, `rejected` or `hidden`.
    status: ReviewStatus,
    /// Why, in the moderation policy's words.
    reasons: Vec<String>,
    labels: Vec<String>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl From<Review> for ReviewDetailBody {
    fn from(r: Review) -> Self {
        Self {
            id: r.id,
            plugin_id: r.plugin_id,
            author_id: r.author_id,
            rating: r.rating,
            title: r.title,
            body: r.body,
            status: r.status,
            reasons: r.reasons,
            labels: r.labels,
            created_at: r.created_at.into(),
            updated_at: r.updated_at.into(),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ReviewDetailEnvelope {
    review: ReviewDetailBody,
}

#[derive(Object)]
#[oai(rename = "PluginReviewPage", rename_all = "camelCase")]
pub struct ReviewPageBody {
    /// In the order the reviews were created.
    items: Vec<ReviewDetailBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

#[derive(ApiResponse)]
pub enum CreatePluginResponse {
    /// The plugin was created.
    #[oai(status = 200)]
    Ok(Json<PluginEnvelope>),
}

#[derive(ApiResponse)]
pub enum ListPluginsResponse {
    #[oai(status = 200)]
    Ok(Json<PluginPageBody>),
}

#[derive(ApiResponse)]
pub enum ListPluginReviewsResponse {
    #[oai(status = 200)]
    Ok(Json<ReviewPageBody>),
}

#[derive(ApiResponse)]
pub enum RestorePluginReviewResponse {
    /// The review as the moderator decided it again.
    #[oai(status = 200)]
    Ok(Json<ReviewDetailEnvelope>),
}

error_responses!(CreatePluginErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);
error_responses!(ReadPluginsErrors: 400, 401, 403, 404, 413, 429, 500, 503);
error_responses!(RestoreReviewErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

fn create_plugin(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::CreatePlugin, ep)
}

fn list_plugins(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListPlugins, ep)
}

fn list_plugin_reviews(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListPluginReviews, ep)
}

fn restore_plugin_review(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RestorePluginReview, ep)
}

pub struct MarketplaceAdminApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Admin")]
impl MarketplaceAdminApi {
    /// Create a plugin
    ///
    /// Requires `admin:write` and a user who administers the organisation, which publishes
    /// it. Plugin names are unique on the instance (409 otherwise).
    #[oai(
        path = "/organisations/:organisationId/plugins",
        method = "post",
        operation_id = "createPlugin",
        transform = "create_plugin"
    )]
    async fn create(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        body: Idempotent<JsonBody<NewPlugin>>,
    ) -> Result<CreatePluginResponse, CreatePluginErrors> {
        let plugin = services
            .admin_create_plugin(
                &auth.0,
                &organisation_id,
                body.input.value.name(),
                &body.write,
            )
            .await?;
        Ok(CreatePluginResponse::Ok(Json(PluginEnvelope {
            plugin: plugin.into(),
        })))
    }

    /// List an organisation's plugins
    ///
    /// Requires `admin:read` and a user who administers the organisation. The plugins it
    /// publishes, in the order they were created, at most `limit` per page.
    #[oai(
        path = "/organisations/:organisationId/plugins",
        method = "get",
        operation_id = "listPlugins",
        transform = "list_plugins"
    )]
    async fn list(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListPluginsResponse, ReadPluginsErrors> {
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let page = services
            .admin_list_plugins(&auth.0, &organisation_id, page)
            .await?;
        Ok(ListPluginsResponse::Ok(Json(PluginPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }

    /// List a plugin's reviews
    ///
    /// Requires `admin:read` and a user who administers the publishing organisation. Every
    /// review, held and hidden ones included, with the moderator's reasons; in the order they
    /// were created. A plugin of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/plugins/:pluginId/reviews",
        method = "get",
        operation_id = "listPluginReviews",
        transform = "list_plugin_reviews"
    )]
    async fn reviews(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "pluginId")] plugin_id: Path<String>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListPluginReviewsResponse, ReadPluginsErrors> {
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let page = services
            .admin_list_reviews(&auth.0, &organisation_id, &plugin_id, page)
            .await?;
        Ok(ListPluginReviewsResponse::Ok(Json(ReviewPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }

    /// Restore a hidden review
    ///
    /// Requires `admin:write` and a user who administers the publishing organisation. The
    /// review's reports are dismissed and the moderator decides again on its content alone;
    /// a review that is not hidden is a 409 `invalid_transition`. Audited as `review.restored`
    /// in the publishing organisation's log. A plugin of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/plugins/:pluginId/reviews/:reviewId/restore",
        method = "post",
        operation_id = "restorePluginReview",
        transform = "restore_plugin_review"
    )]
    async fn restore(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "pluginId")] plugin_id: Path<String>,
        #[oai(name = "reviewId")] review_id: Path<String>,
        body: Idempotent<JsonBody<Restore>>,
    ) -> Result<RestorePluginReviewResponse, RestoreReviewErrors> {
        let review = services
            .admin_restore_review(
                &auth.0,
                &organisation_id,
                &plugin_id,
                &review_id,
                body.input.value.0.as_deref(),
                &body.write,
            )
            .await?;
        Ok(RestorePluginReviewResponse::Ok(Json(
            ReviewDetailEnvelope {
                review: review.into(),
            },
        )))
    }
}
