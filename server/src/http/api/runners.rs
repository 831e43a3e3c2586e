//! DELETE /v1/workspaces/{workspaceId}/runner-pools/{poolId},
//! POST /v1/workspaces/{workspaceId}/runner-commands and
//! POST /v1/runner/webhook-deliveries/{deliveryId}/status (signed by the runner).

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use crate::domain::Operation;
use crate::domain::{CommandStatus, DeliveryStatus, Timestamp, ValidationErrors};
use crate::http::admission::admitted;
use crate::http::auth::{BearerAuth, Signed};
use crate::http::error::error_responses;
use crate::http::fields::{CommandArg, List, ReportedStatus, Text, TimeoutSeconds, request_body};
use crate::http::idempotency::{Idempotent, Permitted, path_id};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{
    DeletePoolInput, DeliveryStatusInput, Permission, Services, SubmitCommandInput,
};
use crate::storage::{RunnerCommand, RunnerPool, WebhookDelivery};

request_body! {
    /// Request body of pool deletion.
    pub struct DeleteRunnerPoolInput {
        /// Why the pool is deleted; kept in the audit log.
        "reason" => reason: optional Text<{ DeletePoolInput::MAX_REASON }>,
        /// Cancel the pool's queued and running commands instead of refusing (409).
        "force" => force: default bool,
    }
}

impl FromJson for DeletePoolInput {
    type Body = DeleteRunnerPoolInput;

    fn from_body(body: DeleteRunnerPoolInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            reason: body.reason.map(|r| r.0),
            force: body.force,
        })
    }
}

#[derive(Object)]
#[oai(rename = "RunnerPool", rename_all = "camelCase")]
pub struct RunnerPoolBody {
    id: Uuid,
    workspace_id: Uuid,
    name: String,
    #[oai(nullable)]
    deleted_at: Option<Timestamp>,
}

impl From<RunnerPool> for RunnerPoolBody {
    fn from(p: RunnerPool) -> Self {
        Self {
            id: p.id,
            workspace_id: p.workspace_id,
            name: p.name,
            deleted_at: p.deleted_at.map(Timestamp::new),
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

request_body! {
    /// Request body of command submission.
    pub struct SubmitRunnerCommandInput {
        /// A live pool of the workspace.
        "poolId" => pool_id: required Uuid,
        /// What the runner runs.
        "command" => command: required Text<{ SubmitCommandInput::MAX_COMMAND }>,
        /// Arguments, passed as given; the audit log keeps only their count.
        "args" => args: default List<CommandArg, 0, { SubmitCommandInput::MAX_ARGS }>,
        /// An environment of the workspace; required when the token is limited to environments.
        "environmentId" => environment_id: optional Uuid,
        "timeoutSeconds" => timeout_seconds: default TimeoutSeconds,
    }
}

impl FromJson for SubmitCommandInput {
    type Body = SubmitRunnerCommandInput;

    fn from_body(body: SubmitRunnerCommandInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            pool_id: body.pool_id,
            command: body.command.0,
            args: body.args.0.into_iter().map(|a| a.0).collect(),
            environment_id: body.environment_id,
            timeout_seconds: body.timeout_seconds.0,
        })
    }
}

#[derive(Object)]
#[oai(rename = "RunnerCommand", rename_all = "camelCase")]
pub struct RunnerCommandBody {
    id: Uuid,
    workspace_id: Uuid,
    pool_id: Uuid,
    #[oai(nullable)]
    environment_id: Option<Uuid>,
    command: String,
    args: Vec<String>,
    timeout_seconds: i32,
    /// `queued → dispatched → running → succeeded | failed | cancelled`.
    status: CommandStatus,
    /// The webhook delivery that carries the command to the pool's runners.
    delivery_id: Uuid,
    created_at: Timestamp,
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
            status: c.status,
            delivery_id: d.id,
            created_at: c.created_at.into(),
        }
    }
}

request_body! {
    /// Request body of a delivery status report.
    pub struct DeliveryStatusReportInput {
        // The states are described on `DeliveryStatusName`: a `$ref` property takes no description.
        "status" => status: required ReportedStatus,
        "detail" => detail: optional Text<{ DeliveryStatusInput::MAX_DETAIL }>,
        "exitCode" => exit_code: optional i32,
    }
}

impl FromJson for DeliveryStatusInput {
    type Body = DeliveryStatusReportInput;

    fn from_body(body: DeliveryStatusReportInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            status: body.status.0,
            detail: body.detail.map(|d| d.0),
            exit_code: body.exit_code,
        })
    }
}

#[derive(Object)]
#[oai(rename = "WebhookDelivery", rename_all = "camelCase")]
pub struct WebhookDeliveryBody {
    id: Uuid,
    command_id: Uuid,
    status: DeliveryStatus,
    updated_at: Timestamp,
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

impl Permitted for DeletePoolInput {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        Permission::DeleteRunnerPool {
            workspace: path_id(req, "workspaceId"),
            pool: path_id(req, "poolId"),
        }
    }
}

impl Permitted for SubmitCommandInput {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        Permission::SubmitRunnerCommand {
            workspace: path_id(req, "workspaceId"),
            input: self,
        }
    }
}

fn delete_runner_pool(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::DeleteRunnerPool, ep)
}

fn submit_runner_command(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::SubmitRunnerCommand, ep)
}

fn report_delivery_status(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ReportDeliveryStatus, ep)
}

pub struct RunnersApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Runners")]
impl RunnersApi {
    /// Delete a runner pool
    ///
    /// Requires `runner-pools:delete` on the workspace. A soft delete: the pool takes no more
    /// commands. 409 `pool_busy` while commands are queued, dispatched or running, unless
    /// `force` is true, which cancels them. A token limited to some environments gets a 403
    /// `forbidden` (`details.openCommandsOutside`), with or without `force`, while the pool has
    /// an open command outside its environments (one without an environment included); nothing
    /// is cancelled. A pool of another workspace or organisation is a 404 like an unknown one.
    #[oai(
        path = "/workspaces/:workspaceId/runner-pools/:poolId",
        method = "delete",
        operation_id = "deleteRunnerPool",
        transform = "delete_runner_pool"
    )]
    async fn delete_pool(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        #[oai(name = "poolId")] pool_id: Path<String>,
        body: Idempotent<JsonBody<DeletePoolInput>>,
    ) -> Result<DeletePoolResponse, DeletePoolErrors> {
        let (pool, cancelled) = services
            .delete_pool(
                &auth.0,
                &workspace_id,
                &pool_id,
                body.input.value,
                &body.write,
            )
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
        operation_id = "submitRunnerCommand",
        transform = "submit_runner_command"
    )]
    async fn submit_command(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        body: Idempotent<JsonBody<SubmitCommandInput>>,
    ) -> Result<SubmitCommandResponse, SubmitCommandErrors> {
        let (command, delivery) = services
            .submit_command(&auth.0, &workspace_id, body.input.value, &body.write)
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
    /// signature failure, 404 for a delivery of another pool or organisation (the same answer
    /// as for a delivery that does not exist), 403 `forbidden` with `details.reason`
    /// `runner_disabled` when a disabled runner reports on any delivery but those sent to it,
    /// 409 `invalid_transition` for a move the state machine forbids. Rate-limited per runner.
    #[oai(
        path = "/runner/webhook-deliveries/:deliveryId/status",
        method = "post",
        operation_id = "reportDeliveryStatus",
        transform = "report_delivery_status"
    )]
    async fn report_delivery_status(
        &self,
        services: Data<&Arc<Services>>,
        #[oai(name = "deliveryId")] delivery_id: Path<String>,
        report: Idempotent<Signed<DeliveryStatusInput>>,
    ) -> Result<DeliveryStatusResponse, DeliveryStatusErrors> {
        let Idempotent { input, write } = report;
        let Signed { runner, body } = input;
        let delivery = services
            .report_delivery_status(&runner, &delivery_id, body.value, &write)
            .await?;
        let envelope = WebhookDeliveryEnvelope {
            delivery: WebhookDeliveryBody {
                id: delivery.id,
                command_id: delivery.command_id,
                status: delivery.status,
                updated_at: delivery.updated_at.into(),
            },
        };
        Ok(DeliveryStatusResponse::Ok(Json(envelope)))
    }
}
