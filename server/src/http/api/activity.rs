//! GET /v1/workspaces/{workspaceId}/activity

use std::sync::Arc;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::Value;
use uuid::Uuid;

use super::ApiTags;
use crate::domain::AuditEvent;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::service::{PageRequest, Services};

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ActivityPageBody {
    /// Newest first.
    items: Vec<ActivityItem>,
    /// Pass as `cursor` for the next (older) page; null on the last page.
    next_cursor: Option<String>,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ActivityItem {
    id: Uuid,
    /// Per-workspace sequence, gapless and increasing.
    sequence: i64,
    /// Event type, such as `token.issued`.
    #[oai(rename = "type")]
    event_type: String,
    actor: ActivityActor,
    target: ActivityTarget,
    correlation_id: String,
    occurred_at: DateTime<Utc>,
    /// Event-specific data; never holds a secret.
    data: Value,
}

#[derive(Object)]
pub struct ActivityActor {
    /// `user` or `admin`.
    kind: String,
    id: Option<Uuid>,
}

#[derive(Object)]
pub struct ActivityTarget {
    kind: String,
    id: Uuid,
}

impl From<AuditEvent> for ActivityItem {
    fn from(e: AuditEvent) -> Self {
        Self {
            id: e.id,
            sequence: e.sequence.unwrap_or_default(),
            event_type: e.event_type,
            actor: ActivityActor {
                kind: e.actor_kind,
                id: e.actor_id,
            },
            target: ActivityTarget {
                kind: e.target_kind,
                id: e.target_id,
            },
            correlation_id: e.correlation_id,
            occurred_at: e.occurred_at,
            data: e.data,
        }
    }
}

#[derive(ApiResponse)]
pub enum ActivityResponse {
    #[oai(status = 200)]
    Ok(Json<ActivityPageBody>),
}

error_responses!(ActivityErrors: 400, 401, 403, 500, 503);

pub struct ActivityApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Audit")]
impl ActivityApi {
    /// List a workspace's activity
    ///
    /// Requires `activity:read` on the workspace. Newest first, `limit` items per page.
    #[oai(
        path = "/workspaces/:workspaceId/activity",
        method = "get",
        operation_id = "listActivity"
    )]
    async fn list(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        /// Page size, 1 to 100 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`.
        cursor: Query<Option<String>>,
    ) -> Result<ActivityResponse, ActivityErrors> {
        let page = PageRequest::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let page = services.list_activity(&auth.0, &workspace_id, page).await?;
        Ok(ActivityResponse::Ok(Json(ActivityPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }
}
