//! DELETE /v1/workspaces/{workspaceId}/runner-pools/{poolId},
//! POST /v1/workspaces/{workspaceId}/runner-commands and
//! POST /v1/runner/webhook-deliveries/{deliveryId}/status (signed by the runner).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use serde_json::Value;
use uuid::Uuid;

use super::ApiTags;
use crate::domain::{CorrelationId, FieldError, ValidationErrors};
use crate::http::auth::{BearerAuth, Signed};
use crate::http::error::error_responses;
use crate::http::idempotency::Idempotent;
use crate::http::payload::{FromJson, JsonBody, JsonObject};
use crate::service::{
    DeletePoolInput, DeliveryStatusInput, Services, SubmitCommandInput, bounded_text,
};
use crate::storage::{RunnerCommand, RunnerPool, WebhookDelivery};

/// Request body of pool deletion.
#[derive(Object)]
#[oai(deny_unknown_fields)]
#[allow(dead_code)] // Documents the body; `DeletePoolInput::from_json` parses it.
pub struct DeleteRunnerPoolInput {
    /// Why the pool is deleted; kept in the audit log.
    #[oai(validator(min_length = 1, max_length = 500))]
    reason: Option<String>,
    /// Cancel the pool's queued and running commands instead of refusing (409).
    #[oai(default)]
    force: bool,
}

impl FromJson for DeletePoolInput {
    type Schema = DeleteRunnerPoolInput;

    fn from_json(value: Value) -> Result<Self, ValidationErrors> {
        let mut body = JsonObject::new(value)?;
        let reason = body.string("reason", false, |s| bounded_text(s, 500));
        let force = body.boolean("force", false);
        body.finish()?;
        Ok(Self {
            reason,
            force: force.unwrap_or(false),
        })
    }
}

#[derive(Object)]
#[oai(rename = "RunnerPool", rename_all = "camelCase")]
pub struct RunnerPoolBody {
    id: Uuid,
    workspace_id: Uuid,
    name: String,
    deleted_at: Option<DateTime<Utc>>,
}

impl From<RunnerPool> for RunnerPoolBody {
    fn from(p: RunnerPool) -> Self {
        Self {
            id: p.id,
            workspace_id: p.workspace_id,
            name: p.name,
            deleted_at: p.deleted_at,
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct DeletedRunnerPoolEnvelope {
    pool: RunnerPoolBody,
    /// Commands cancelled by `force`.
    cancelled_commands: u64,
}

/// Request body of command submission.
#[derive(Object)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // Documents the body; `SubmitCommandInput::from_json` parses it.
pub struct SubmitRunnerCommandInput {
    /// A live pool of the workspace.
    pool_id: Uuid,
    /// What the runner runs.
    #[oai(validator(min_length = 1, max_length = 200))]
    command: String,
    /// Arguments, passed as given; the audit log keeps only their count.
    #[oai(default, validator(max_items = 64))]
    args: Vec<String>,
    /// An environment of the workspace; required when the token is limited to environments.
    environment_id: Option<Uuid>,
    #[oai(
        default = "default_timeout",
        validator(minimum(value = "1"), maximum(value = "86400"))
    )]
    timeout_seconds: i64,
}

fn default_timeout() -> i64 {
    i64::from(SubmitCommandInput::DEFAULT_TIMEOUT)
}

impl FromJson for SubmitCommandInput {
    type Schema = SubmitRunnerCommandInput;

    fn from_json(value: Value) -> Result<Self, ValidationErrors> {
        let mut body = JsonObject::new(value)?;
        let pool_id = body.uuid("poolId", true);
        let command = body.string("command", true, |s| {
            bounded_text(s, SubmitCommandInput::MAX_COMMAND)
        });
        let args = body.string_array("args", false, |s| {
            if s.contains('\0') || s.chars().count() > SubmitCommandInput::MAX_ARG {
                Err(format!(
                    "must be at most {} characters without NUL",
                    SubmitCommandInput::MAX_ARG
                ))
            } else {
                Ok(s.to_owned())
            }
        });
        if args
            .as_ref()
            .is_some_and(|a| a.len() > SubmitCommandInput::MAX_ARGS)
        {
            body.reject(FieldError::new(
                "args",
                format!("must have at most {} items", SubmitCommandInput::MAX_ARGS),
            ));
        }
        let environment_id = body.uuid("environmentId", false);
        let timeout = body.integer("timeoutSeconds", false, SubmitCommandInput::parse_timeout);
        body.finish()?;
        match (pool_id, command) {
            (Some(pool_id), Some(command)) => Ok(Self {
                pool_id,
                command,
                args: args.unwrap_or_default(),
                environment_id,
                timeout_seconds: timeout.unwrap_or(SubmitCommandInput::DEFAULT_TIMEOUT),
            }),
            _ => Err(FieldError::new("body", "is incomplete").into()),
        }
    }
}

#[derive(Object)]
#[oai(rename = "RunnerCommand", rename_all = "camelCase")]
pub struct RunnerCommandBody {
    id: Uuid,
    workspace_id: Uuid,
    pool_id: Uuid,
    environment_id: Option<Uuid>,
    command: String,
    args: Vec<String>,
    timeout_seconds: i32,
    /// `queued → dispatched → running → succeeded | failed | cancelled`.
    #[oai(validator(pattern = "^(queued|dispatched|running|succeeded|failed|cancelled)$"))]
    status: String,
    /// The webhook delivery that carries the command to the pool's runners.
    delivery_id: Uuid,
    created_at: DateTime<Utc>,
}

#[derive(Object)]
pub struct RunnerCommandEnvelope {
    command: RunnerCommandBody,
}

impl RunnerCommandBody {
    fn new(c: RunnerCommand, d: &WebhookDelivery) -> Self {
        Self {
            id: c.id,
            workspace_id: c.workspace_id,
            pool_id: c.pool_id,
            environment_id: c.environment_id,
            command: c.command,
            args: c.args,
            timeout_seconds: c.timeout_seconds,
            status: c.status.as_str().to_owned(),
            delivery_id: d.id,
            created_at: c.created_at,
        }
    }
}

/// Request body of a delivery status report.
#[derive(Object)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // Documents the body; `DeliveryStatusInput::from_json` parses it.
pub struct DeliveryStatusReportInput {
    /// `pending → received → running → succeeded | failed`; `failed` also from any live state.
    status: DeliveryStatusName,
    #[oai(validator(min_length = 1, max_length = 2000))]
    detail: Option<String>,
    exit_code: Option<i32>,
}

#[derive(Enum)]
#[oai(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum DeliveryStatusName {
    Received,
    Running,
    Succeeded,
    Failed,
}

impl FromJson for DeliveryStatusInput {
    type Schema = DeliveryStatusReportInput;

    fn from_json(value: Value) -> Result<Self, ValidationErrors> {
        let mut body = JsonObject::new(value)?;
        let status = body.string("status", true, DeliveryStatusInput::parse_status);
        let detail = body.string("detail", false, |s| {
            bounded_text(s, DeliveryStatusInput::MAX_DETAIL)
        });
        let exit_code = body.integer("exitCode", false, |n| {
            i32::try_from(n).map_err(|_| "must be a 32-bit integer".to_owned())
        });
        body.finish()?;
        let status = status.ok_or_else(|| FieldError::new("status", "is required"))?;
        Ok(Self {
            status,
            detail,
            exit_code,
        })
    }
}

#[derive(Object)]
#[oai(rename = "WebhookDelivery", rename_all = "camelCase")]
pub struct WebhookDeliveryBody {
    id: Uuid,
    command_id: Uuid,
    #[oai(validator(pattern = "^(pending|received|running|succeeded|failed)$"))]
    status: String,
    updated_at: DateTime<Utc>,
}

#[derive(Object)]
pub struct WebhookDeliveryEnvelope {
    delivery: WebhookDeliveryBody,
}

#[derive(ApiResponse)]
pub enum DeletePoolResponse {
    /// The pool is deleted (soft: its history stays).
    #[oai(status = 200)]
    Ok(Json<DeletedRunnerPoolEnvelope>),
}

#[derive(ApiResponse)]
pub enum SubmitCommandResponse {
    /// The command is queued and its delivery pending.
    #[oai(status = 200)]
    Ok(Json<RunnerCommandEnvelope>),
}

#[derive(ApiResponse)]
pub enum DeliveryStatusResponse {
    /// The delivery (and its command) moved.
    #[oai(status = 200)]
    Ok(Json<WebhookDeliveryEnvelope>),
}

error_responses!(DeletePoolErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);
error_responses!(SubmitCommandErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);
error_responses!(DeliveryStatusErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

pub struct RunnersApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Runners")]
impl RunnersApi {
    /// Delete a runner pool
    ///
    /// Requires `runner-pools:delete` on the workspace. A soft delete: the pool takes no more
    /// commands. 409 `pool_busy` while commands are queued, dispatched or running, unless
    /// `force` is true, which cancels them.
    #[oai(
        path = "/workspaces/:workspaceId/runner-pools/:poolId",
        method = "delete",
        operation_id = "deleteRunnerPool"
    )]
    async fn delete_pool(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        cid: Data<&CorrelationId>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        #[oai(name = "poolId")] pool_id: Path<String>,
        body: Idempotent<JsonBody<DeletePoolInput>>,
    ) -> Result<DeletePoolResponse, DeletePoolErrors> {
        let (pool, cancelled) = services
            .delete_pool(&auth.0, &workspace_id, &pool_id, body.0.value, &cid)
            .await?;
        let envelope = DeletedRunnerPoolEnvelope {
            pool: pool.into(),
            cancelled_commands: cancelled,
        };
        Ok(DeletePoolResponse::Ok(Json(envelope)))
    }

    /// Submit a command to a runner pool
    ///
    /// Requires `runner-commands:submit` on the workspace. Creates the command `queued` and its
    /// webhook delivery `pending`. 404 for a pool or environment not in the workspace, 409
    /// `pool_deleted` for a deleted pool.
    #[oai(
        path = "/workspaces/:workspaceId/runner-commands",
        method = "post",
        operation_id = "submitRunnerCommand"
    )]
    async fn submit_command(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        cid: Data<&CorrelationId>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        body: Idempotent<JsonBody<SubmitCommandInput>>,
    ) -> Result<SubmitCommandResponse, SubmitCommandErrors> {
        let (command, delivery) = services
            .submit_command(&auth.0, &workspace_id, body.0.value, &cid)
            .await?;
        let envelope = RunnerCommandEnvelope {
            command: RunnerCommandBody::new(command, &delivery),
        };
        Ok(SubmitCommandResponse::Ok(Json(envelope)))
    }

    /// Report a webhook delivery's status (signed by the runner)
    ///
    /// Authenticated by the runner's Ed25519 signature, not a bearer token: the headers
    /// `x-sandbox-signature`, `x-sandbox-runner-id`, `x-sandbox-key-id`, `x-sandbox-timestamp`
    /// and `x-sandbox-nonce` (see the description of the API). 401 `invalid_signature` for any
    /// signature failure, 403 for a delivery of another pool, 409 `invalid_transition` for a
    /// move the state machine forbids. Rate-limited per runner.
    #[oai(
        path = "/runner/webhook-deliveries/:deliveryId/status",
        method = "post",
        operation_id = "reportDeliveryStatus"
    )]
    async fn report_delivery_status(
        &self,
        services: Data<&Arc<Services>>,
        cid: Data<&CorrelationId>,
        #[oai(name = "deliveryId")] delivery_id: Path<String>,
        report: Idempotent<Signed<DeliveryStatusInput>>,
    ) -> Result<DeliveryStatusResponse, DeliveryStatusErrors> {
        let Signed { runner, body } = report.0;
        let delivery = services
            .report_delivery_status(&runner, &delivery_id, body.value, &cid)
            .await?;
        let envelope = WebhookDeliveryEnvelope {
            delivery: WebhookDeliveryBody {
                id: delivery.id,
                command_id: delivery.command_id,
                status: delivery.status.as_str().to_owned(),
                updated_at: delivery.updated_at,
            },
        };
        Ok(DeliveryStatusResponse::Ok(Json(envelope)))
    }
}
