//! GET /v1/workspaces/{workspaceId}/activity

use std::sync::Arc;

use poem::web::Data;
use poem::{Endpoint, IntoResponse, Response};
use poem_openapi::param::{Path, Query};
use poem_openapi::registry::{MetaMediaType, MetaResponse, MetaResponses, Registry};
use poem_openapi::types::Type;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::ApiTags;
use crate::domain::Operation;
use crate::domain::Timestamp;
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::service::{PageRequest, Services};

// The `Object` types below document the page; `Page`/`Item` write it. Event data is passed
// through as stored JSON text, which poem-openapi's object model would parse and rebuild.

#[derive(Object)]
#[oai(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct ActivityPageBody {
    /// Newest first.
    items: Vec<ActivityItem>,
    /// Pass as `cursor` for the next (older) page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
#[allow(dead_code)]
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
    occurred_at: Timestamp,
    /// Event-specific data; never holds a secret.
    data: Value,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct ActivityActor {
    /// `user`, `admin` (cpctl), `runner` (a signed report) or `system` (the server itself:
    /// a command timed out, or a delivery's attempts ran out).
    kind: String,
    /// The user or the runner; null for `admin` and `system`.
    #[oai(nullable)]
    id: Option<Uuid>,
    /// The token the user acted with; absent for other kinds, and for events written before
    /// events named the token.
    #[oai(skip_serializing_if_is_none)]
    token_id: Option<Uuid>,
}

#[derive(Object)]
#[allow(dead_code)]
pub struct ActivityTarget {
    kind: String,
    id: Uuid,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Page<'a> {
    items: Vec<Item<'a>>,
    next_cursor: Option<&'a str>,
}

/// One item: the one serialisation of an event (`domain/audit_chain.rs`), which the stream and
/// `cpctl audit export` write too.
pub(super) use crate::domain::EventJson as Item;

/// 200 with an `ActivityPageBody`, serialised straight from the events.
pub struct ActivityResponse(Vec<u8>);

impl ApiResponse for ActivityResponse {
    fn meta() -> MetaResponses {
        MetaResponses {
            responses: vec![MetaResponse {
                description: "A page of the workspace's activity, newest first",
                status: Some(200),
                status_range: None,
                content: vec![MetaMediaType {
                    content_type: "application/json; charset=utf-8",
                    schema: ActivityPageBody::schema_ref(),
                }],
                headers: vec![],
            }],
        }
    }

    fn register(registry: &mut Registry) {
        ActivityPageBody::register(registry);
    }
}

impl IntoResponse for ActivityResponse {
    fn into_response(self) -> Response {
        Response::builder()
            .content_type("application/json; charset=utf-8")
            .body(self.0)
    }
}

error_responses!(ActivityErrors: 400, 401, 403, 410, 413, 429, 500, 503);

fn list_activity(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ReadActivity, ep)
}

pub struct ActivityApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Audit")]
impl ActivityApi {
    /// List a workspace's activity
    ///
    /// Requires `activity:read` on the workspace. Newest first, at most `limit` items per page.
    ///
    /// A token limited to some environments reads no event tied to another environment (one
    /// whose data names another `environmentId`), nor events of commands sent to no
    /// environment; its page may then hold fewer than `limit` items, even none, while
    /// `nextCursor` says more of the log remains.
    ///
    /// A cursor into events removed by the organisation's retention is a 410 `cursor_expired`
    /// (`details.oldestSequence` is the oldest kept): start again from the first page.
    #[oai(
        path = "/workspaces/:workspaceId/activity",
        method = "get",
        operation_id = "listActivity",
        transform = "list_activity"
    )]
    async fn list(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        /// Page size, 1 to 100 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ActivityResponse, ActivityErrors> {
        let page = PageRequest::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let page = services.list_activity(&auth.0, &workspace_id, page).await?;
        let body = Page {
            items: page.items.iter().map(Item::from).collect(),
            next_cursor: page.next_cursor.as_deref(),
        };
        // Sized up front: growing a ~30 KB page by doubling copied it several times over.
        let estimate = 64
            + page
                .items
                .iter()
                .map(|e| 384 + e.data.get().len())
                .sum::<usize>();
        let mut bytes = Vec::with_capacity(estimate);
        serde_json::to_writer(&mut bytes, &body)
            .map_err(|e| ApiFailure::from(crate::service::ServiceError::Internal(e.to_string())))?;
        Ok(ActivityResponse(bytes))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::value::RawValue;

    use super::*;
    use crate::domain::AuditEvent;

    /// The page is written by hand (`Page`/`Item`) for speed and documented by the `Object`
    /// types above: every object must carry exactly the properties its schema names.
    #[test]
    fn the_written_page_has_exactly_the_documented_properties() {
        let event = AuditEvent {
            id: Uuid::new_v4(),
            organisation_id: Uuid::new_v4(),
            workspace_id: Some(Uuid::new_v4()),
            sequence: Some(1),
            event_type: "token.issued".into(),
            actor_kind: "user".into(),
            actor_id: Some(Uuid::new_v4()),
            actor_token_id: Some(Uuid::new_v4()),
            target_kind: "token".into(),
            target_id: Uuid::new_v4(),
            correlation_id: "corr-0001".into(),
            occurred_at: chrono::Utc::now(),
            data: RawValue::from_string("{}".into()).unwrap(),
        };
        let page = Page {
            items: vec![Item::from(&event)],
            next_cursor: Some("next"),
        };
        let written = serde_json::to_value(&page).unwrap();
        let doc: Value = serde_json::from_str(&crate::http::openapi_document()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let keys = |v: &Value| {
            v.as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<BTreeSet<_>>()
        };
        let item = &written["items"][0];
        for (schema, object) in [
            ("ActivityPageBody", &written),
            ("ActivityItem", item),
            ("ActivityActor", &item["actor"]),
            ("ActivityTarget", &item["target"]),
        ] {
            assert_eq!(
                keys(object),
                keys(&schemas[schema]["properties"]),
                "{schema} and what the handler writes disagree"
            );
        }
    }
}
