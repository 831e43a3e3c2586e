//! An organisation's webhook deliveries on the admin plane: a pool's deliveries
//! (`/runner-pools/{poolId}/deliveries`, and `/recover`), one delivery with every attempt
//! (`/deliveries/{deliveryId}`) and resending it. Thin: the rules are
//! `service/delivery_admin.rs`'s.

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::Value;
use uuid::Uuid;

use super::ApiTags;
use crate::domain::{
    CommandStatus, DeliveryStatus, FieldError, Operation, Timestamp, ValidationErrors,
};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::http::fields::{Invalid, JsonValue, request_body};
use crate::http::idempotency::{Idempotent, Permitted, admin_permission};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{AdminPage, Permission, Resent, Services};
use crate::storage::{AttemptRecord, DeliveryReport, DeliverySummary};

// A request's time: RFC 3339, any offset.
impl JsonValue for Timestamp {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        let raw = value.as_str().ok_or(Invalid::Type("must be a string"))?;
        Timestamp::parse(raw).map_err(|_| Invalid::Rule("must be an RFC 3339 time".into()))
    }
}

request_body! {
    /// Request body of resending a delivery: an empty object.
    pub struct ResendDeliveryInput {}
}

#[derive(Debug)]
pub struct Resend;

impl FromJson for Resend {
    type Body = ResendDeliveryInput;

    fn from_body(_: ResendDeliveryInput) -> Result<Self, ValidationErrors> {
        Ok(Self)
    }
}

impl Permitted for Resend {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::ResendDelivery, req)
    }
}

request_body! {
    /// Request body of recovering a pool's failed deliveries.
    pub struct RecoverDeliveriesInput {
        /// Deliveries that failed at or after this time (RFC 3339) are resent, each once.
        "since" => since: required Timestamp,
    }
}

#[derive(Debug)]
pub struct Recover {
    since: Timestamp,
}

impl FromJson for Recover {
    type Body = RecoverDeliveriesInput;

    fn from_body(body: RecoverDeliveriesInput) -> Result<Self, ValidationErrors> {
        Ok(Self { since: body.since })
    }
}

impl Permitted for Recover {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::RecoverDeliveries, req)
    }
}

#[derive(Object)]
#[oai(rename = "DeliverySummary", rename_all = "camelCase")]
pub struct DeliverySummaryBody {
    id: Uuid,
    command_id: Uuid,
    workspace_id: Uuid,
    pool_id: Uuid,
    status: DeliveryStatus,
    command_status: CommandStatus,
    attempts: i32,
    /// The `webhook-id` its attempts carry (a resent delivery keeps the first one's).
    webhook_id: Uuid,
    /// The delivery that carried it again, once resent.
    #[oai(nullable)]
    resent_as: Option<Uuid>,
    #[oai(nullable)]
    next_attempt_at: Option<Timestamp>,
    /// No runner of the pool can take it now.
    waiting_for_runner: bool,
    #[oai(nullable)]
    detail: Option<String>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl From<DeliverySummary> for DeliverySummaryBody {
    fn from(d: DeliverySummary) -> Self {
        Self {
            id: d.id,
            command_id: d.command_id,
            workspace_id: d.workspace_id,
            pool_id: d.pool_id,
            status: d.status,
            command_status: d.command_status,
            attempts: d.attempts,
            webhook_id: d.webhook_id,
            resent_as: d.resent_as,
            next_attempt_at: d.next_attempt_at.map(Timestamp::new),
            waiting_for_runner: d.waiting_for_runner,
            detail: d.detail,
            created_at: d.created_at.into(),
            updated_at: d.updated_at.into(),
        }
    }
}

#[derive(Object)]
#[oai(rename = "DeliveryPage", rename_all = "camelCase")]
pub struct DeliveryPageBody {
    /// Newest first.
    items: Vec<DeliverySummaryBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

#[derive(Object)]
#[oai(rename = "DeliveryAttempt", rename_all = "camelCase")]
pub struct AttemptBody {
    number: i32,
    runner_id: Uuid,
    /// Where it was sent.
    url: String,
    started_at: Timestamp,
    /// Null while in flight, or when the replica sending it stopped.
    #[oai(nullable)]
    finished_at: Option<Timestamp>,
    #[oai(nullable)]
    status_code: Option<i32>,
    #[oai(nullable)]
    latency_ms: Option<i32>,
    /// The full error, for an administrator (events carry only its category).
    #[oai(nullable)]
    error: Option<String>,
}

impl From<AttemptRecord> for AttemptBody {
    fn from(a: AttemptRecord) -> Self {
        Self {
            number: a.number,
            runner_id: a.runner_id,
            url: a.url,
            started_at: a.started_at.into(),
            finished_at: a.finished_at.map(Timestamp::new),
            status_code: a.status_code,
            latency_ms: a.latency_ms,
            error: a.error,
        }
    }
}

#[derive(Object)]
#[oai(rename = "DeliveryDetail", rename_all = "camelCase")]
pub struct DeliveryDetailBody {
    id: Uuid,
    command_id: Uuid,
    workspace_id: Uuid,
    pool_id: Uuid,
    status: DeliveryStatus,
    command_status: CommandStatus,
    #[oai(nullable)]
    detail: Option<String>,
    #[oai(nullable)]
    next_attempt_at: Option<Timestamp>,
    /// Every attempt, first first.
    attempts: Vec<AttemptBody>,
}

impl From<DeliveryReport> for DeliveryDetailBody {
    fn from(r: DeliveryReport) -> Self {
        Self {
            id: r.delivery_id,
            command_id: r.command_id,
            workspace_id: r.workspace_id,
            pool_id: r.pool_id,
            status: r.status,
            command_status: r.command_status,
            detail: r.detail,
            next_attempt_at: r.next_attempt_at.map(Timestamp::new),
            attempts: r.attempts.into_iter().map(Into::into).collect(),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct DeliveryEnvelope {
    delivery: DeliveryDetailBody,
}

#[derive(Object)]
#[oai(rename = "ResentDelivery", rename_all = "camelCase")]
pub struct ResentBody {
    /// The delivery resent.
    delivery_id: Uuid,
    /// The delivery that carries the new attempt: the same one (it was pending), or the new
    /// command's (it had failed).
    sent_as: Uuid,
    /// The new command, when a failed delivery was resent.
    #[oai(nullable)]
    new_command_id: Option<Uuid>,
    /// The same `webhook-id` the resent delivery's attempts carried.
    webhook_id: Uuid,
}

impl From<Resent> for ResentBody {
    fn from(r: Resent) -> Self {
        Self {
            delivery_id: r.delivery_id,
            sent_as: r.sent_as,
            new_command_id: r.new_command_id,
            webhook_id: r.webhook_id,
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ResentEnvelope {
    resent: ResentBody,
}

#[derive(Object)]
#[oai(rename = "RecoveredDeliveries", rename_all = "camelCase")]
pub struct RecoveredBody {
    since: Timestamp,
    /// How many were resent.
    resent: u32,
    deliveries: Vec<ResentBody>,
}

#[derive(ApiResponse)]
pub enum ListDeliveriesResponse {
    #[oai(status = 200)]
    Ok(Json<DeliveryPageBody>),
}

#[derive(ApiResponse)]
pub enum GetDeliveryResponse {
    #[oai(status = 200)]
    Ok(Json<DeliveryEnvelope>),
}

#[derive(ApiResponse)]
pub enum ResendDeliveryResponse {
    /// Resent.
    #[oai(status = 200)]
    Ok(Json<ResentEnvelope>),
}

#[derive(ApiResponse)]
pub enum RecoverDeliveriesResponse {
    /// What was resent (nothing, when none had failed since then).
    #[oai(status = 200)]
    Ok(Json<RecoveredBody>),
}

error_responses!(ReadDeliveriesErrors: 400, 401, 403, 404, 413, 429, 500, 503);
error_responses!(ResendDeliveriesErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

fn list_deliveries(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListDeliveries, ep)
}

fn get_delivery(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::GetDelivery, ep)
}

fn resend_delivery(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ResendDelivery, ep)
}

fn recover_deliveries(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RecoverDeliveries, ep)
}

// A filter present is parsed, empty or not: the document's enum and format list no empty value.
fn parse_status(raw: Option<&str>) -> Result<Option<DeliveryStatus>, ValidationErrors> {
    raw.map(|s| DeliveryStatus::parse(s).map_err(|reason| FieldError::new("status", reason).into()))
        .transpose()
}

fn parse_since(raw: Option<&str>) -> Result<Option<Timestamp>, ValidationErrors> {
    raw.map(|s| {
        Timestamp::parse(s).map_err(|_| FieldError::new("since", "must be an RFC 3339 time").into())
    })
    .transpose()
}

pub struct DeliveriesApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Admin")]
impl DeliveriesApi {
    /// List a pool's deliveries
    ///
    /// Requires `admin:read` and a user who administers the organisation. Newest first, at
    /// most `limit` per page; `status` and `since` (last changed at or after, RFC 3339) narrow
    /// it. A pool of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/runner-pools/:poolId/deliveries",
        method = "get",
        operation_id = "listDeliveries",
        transform = "list_deliveries"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "poolId")] pool_id: Path<String>,
        /// `pending`, `received`, `running`, `succeeded` or `failed`.
        status: Query<Option<String>>,
        /// Last changed at or after this time (RFC 3339).
        since: Query<Option<String>>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListDeliveriesResponse, ReadDeliveriesErrors> {
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let status = parse_status(status.0.as_deref()).map_err(ApiFailure::from)?;
        let since = parse_since(since.0.as_deref())
            .map_err(ApiFailure::from)?
            .map(|t| t.get());
        let page = services
            .admin_list_deliveries(&auth.0, &organisation_id, &pool_id, status, since, page)
            .await?;
        Ok(ListDeliveriesResponse::Ok(Json(DeliveryPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }

    /// Show a delivery and its attempts
    ///
    /// Requires `admin:read` and a user who administers the organisation. Every attempt with
    /// its runner, URL, status, latency and full error (events carry only the error's
    /// category). A delivery of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/deliveries/:deliveryId",
        method = "get",
        operation_id = "getDelivery",
        transform = "get_delivery"
    )]
    async fn show(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "deliveryId")] delivery_id: Path<String>,
    ) -> Result<GetDeliveryResponse, ReadDeliveriesErrors> {
        let report = services
            .admin_get_delivery(&auth.0, &organisation_id, &delivery_id)
            .await?;
        Ok(GetDeliveryResponse::Ok(Json(DeliveryEnvelope {
            delivery: report.into(),
        })))
    }

    /// Resend a delivery
    ///
    /// Requires `admin:write` and a user who administers the organisation. A `pending`
    /// delivery of an open command gets an attempt now; a `failed` one is resent once, as a
    /// new command whose delivery carries the same `webhook-id`. Anything else is a 409
    /// `invalid_state`. Audited as `webhook_delivery.resent` in the delivery's workspace. A
    /// delivery of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/deliveries/:deliveryId/resend",
        method = "post",
        operation_id = "resendDelivery",
        transform = "resend_delivery"
    )]
    async fn resend(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "deliveryId")] delivery_id: Path<String>,
        body: Idempotent<JsonBody<Resend>>,
    ) -> Result<ResendDeliveryResponse, ResendDeliveriesErrors> {
        let resent = services
            .admin_resend_delivery(&auth.0, &organisation_id, &delivery_id, &body.write)
            .await?;
        Ok(ResendDeliveryResponse::Ok(Json(ResentEnvelope {
            resent: resent.into(),
        })))
    }

    /// Resend a pool's failed deliveries
    ///
    /// Requires `admin:write` and a user who administers the organisation. Every delivery of
    /// the pool that failed at or after `since` and was not resent yet is resent once, each
    /// audited as `webhook_delivery.resent`. A pool of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/runner-pools/:poolId/deliveries/recover",
        method = "post",
        operation_id = "recoverDeliveries",
        transform = "recover_deliveries"
    )]
    async fn recover(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "poolId")] pool_id: Path<String>,
        body: Idempotent<JsonBody<Recover>>,
    ) -> Result<RecoverDeliveriesResponse, ResendDeliveriesErrors> {
        let since = body.input.value.since;
        let resent = services
            .admin_recover_deliveries(
                &auth.0,
                &organisation_id,
                &pool_id,
                since.get(),
                &body.write,
            )
            .await?;
        Ok(RecoverDeliveriesResponse::Ok(Json(RecoveredBody {
            since,
            resent: u32::try_from(resent.len()).unwrap_or(u32::MAX),
            deliveries: resent.into_iter().map(Into::into).collect(),
        })))
    }
}
