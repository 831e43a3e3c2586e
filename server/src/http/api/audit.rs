//! GET /v1/workspaces/{workspaceId}/audit/stream: Server-Sent Events.

use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use poem::web::Data;
use poem::{Body, Endpoint, IntoResponse, Request, Response};
use poem_openapi::param::{Path, Query};
use poem_openapi::registry::{MetaMediaType, MetaResponse, MetaResponses, Registry};
use poem_openapi::types::Type;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::ApiTags;
use super::activity::{ActivityItem, Item};
use crate::domain::Operation;
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::service::{ServiceError, Services, StreamItem, StreamRequest};

/// How often an idle stream sends a comment line, so proxies keep it open and a vanished
/// client is noticed.
#[derive(Debug, Clone, Copy)]
pub struct Heartbeat(pub Duration);

type EventStream = Pin<Box<dyn Stream<Item = Result<StreamItem, ServiceError>> + Send>>;

// The response's schema describes one event, not the whole stream: what OpenAPI 3.2 names
// `itemSchema`, and how schemathesis reads `schema` before 3.2. Documents only; `render` writes.
/// One event of the audit stream, as a Server-Sent Events parser hands it over.
#[derive(Object)]
#[allow(dead_code)]
pub struct AuditStreamEvent {
    /// The workspace sequence of the event, in decimal: send it back as `Last-Event-ID`.
    #[oai(validator(pattern = "^[0-9]+$"))]
    id: String,
    /// The event type, the same as `type` in `data`, such as `token.issued`.
    event: String,
    /// One `ActivityItem` (as `GET activity` lists them) as JSON, on one line.
    data: String,
}

/// 200 `text/event-stream`.
pub struct AuditStreamResponse {
    events: EventStream,
    heartbeat: Duration,
}

impl ApiResponse for AuditStreamResponse {
    fn meta() -> MetaResponses {
        MetaResponses {
            responses: vec![MetaResponse {
                description: "Server-Sent Events: `id:` is the workspace sequence, `event:` the \
                              event type, `data:` one JSON activity item; comment lines are \
                              heartbeats, and a last comment (`: access revoked`, \
                              `: token expired`, `: access denied`) when the token loses access, \
                              or `: max age reached; reconnect with Last-Event-ID` at the \
                              stream's maximum age",
                status: Some(200),
                status_range: None,
                content: vec![MetaMediaType {
                    content_type: "text/event-stream",
                    schema: AuditStreamEvent::schema_ref(),
                }],
                headers: vec![],
            }],
        }
    }

    fn register(registry: &mut Registry) {
        AuditStreamEvent::register(registry);
        ActivityItem::register(registry);
    }
}

fn render(item: Result<StreamItem, ServiceError>) -> bytes::Bytes {
    match item {
        // The last item: the response ends after it.
        Ok(StreamItem::End(end)) => format!(": {}\n\n", end.as_str()).into(),
        Ok(StreamItem::Event(event)) => {
            let data = serde_json::to_string(&Item::from(event.as_ref())).unwrap_or_default();
            format!(
                "id: {}\nevent: {}\ndata: {data}\n\n",
                event.sequence.unwrap_or_default(),
                event.event_type
            )
            .into()
        }
        Err(e) => {
            tracing::warn!(error = %e, "audit stream ended early");
            // The stream ends here; the client resumes from its last id.
            bytes::Bytes::from_static(
                b": the stream was interrupted; reconnect with Last-Event-ID\n\n",
            )
        }
    }
}

impl IntoResponse for AuditStreamResponse {
    fn into_response(self) -> Response {
        let mut events = self.events.map(render);
        let period = self.heartbeat;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        let mut opened = false;
        let body = futures_util::stream::poll_fn(move |cx| {
            if !opened {
                opened = true;
                // Tells the client how soon to reconnect, and that the subscription is live.
                return Poll::Ready(Some(Ok::<_, std::io::Error>(bytes::Bytes::from_static(
                    b"retry: 2000\n: subscribed\n\n",
                ))));
            }
            if let Poll::Ready(item) = events.poll_next_unpin(cx) {
                tick.reset();
                return Poll::Ready(item.map(Ok));
            }
            tick.poll_tick(cx)
                .map(|_| Some(Ok(bytes::Bytes::from_static(b": heartbeat\n\n"))))
        });
        Response::builder()
            .content_type("text/event-stream")
            .header("cache-control", "no-cache")
            .header("x-accel-buffering", "no")
            .body(Body::from_bytes_stream(body))
    }
}

error_responses!(AuditStreamErrors: 400, 401, 403, 410, 413, 429, 500, 503);

fn stream_audit_events(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ReadAuditStream, ep)
}

pub struct AuditApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Audit")]
impl AuditApi {
    /// Stream a workspace's audit events
    ///
    /// Requires `audit:read` on the workspace. Server-Sent Events: with `Last-Event-ID` (or
    /// `after`) the durable log is replayed from that sequence, then live events follow, from
    /// every replica, with no gap and no duplicate. Without either, only events from now on.
    /// A comment line is sent every 15 seconds when idle. A token limited to some environments
    /// gets the events `GET activity` would list for it, no others.
    ///
    /// The stream lasts only as long as the token may read it, on every replica: it ends with a
    /// last comment saying why (`: access revoked`, `: token expired`, `: access denied`) within
    /// 2 seconds of the token's revocation on this workspace (or entirely), its expiry, or an
    /// activated policy denying it, and reconnecting then gets the 401 or 403 any request
    /// would. No event written after the token's revocation on this workspace, or after its
    /// expiry, is sent to it.
    ///
    /// A stream lasts at most an hour (configurable): it then ends cleanly with the last comment
    /// `: max age reached; reconnect with Last-Event-ID`, between two events, and reconnecting
    /// with the id of the last event received (as browsers do by themselves) resumes with no gap
    /// and no repeat. A token may hold 8 streams at once and a workspace 64 (configurable, per
    /// replica): the next one is a 429 `rate_limited`; when the server holds as many streams as
    /// it may (1024 by default) it is a 503 `unavailable`. Both carry `retry-after` and
    /// `details` with the `scope` (`token`, `workspace` or `process`) and its `limit`. A stream
    /// frees its place when it ends, or when a write to its vanished client fails (within two
    /// heartbeats). The replay is read from the log a page at a time.
    ///
    /// A `Last-Event-ID` (or `after` other than 0) whose next events were removed by the
    /// organisation's retention is a 410 `cursor_expired` (`details.oldestSequence` is the
    /// oldest kept) rather than a replay with a gap; `after=0` replays what is kept.
    #[oai(
        path = "/workspaces/:workspaceId/audit/stream",
        method = "get",
        operation_id = "streamAuditEvents",
        transform = "stream_audit_events"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn stream(
        &self,
        req: &Request,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        heartbeat: Data<&Heartbeat>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        /// Replay events with a sequence above this one (`Last-Event-ID` wins when both are
        /// given). Empty is the same as absent: only new events.
        after: Query<Option<String>>,
        /// Comma-separated event types to include, such as `token.issued,runner_pool.deleted`.
        types: Query<Option<String>>,
    ) -> Result<AuditStreamResponse, AuditStreamErrors> {
        let last_event_id = req
            .headers()
            .get("last-event-id")
            .map(|v| v.to_str().unwrap_or("invalid"));
        let request = StreamRequest::parse(last_event_id, after.0.as_deref(), types.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e))?;
        let events = services
            .audit_stream(&auth.0, &workspace_id, request)
            .await?;
        Ok(AuditStreamResponse {
            events: Box::pin(events),
            heartbeat: heartbeat.0.0,
        })
    }
}
