//! An organisation's runner pools, runners and runner keys on the admin plane:
//! `/v1/organisations/{organisationId}/workspaces/{workspaceId}/runner-pools`,
//! `/runner-pools/{poolId}/runners` and `/runners/{runnerId}/...`. Thin: the rules are
//! `service/fleet.rs`'s and the runner services'. A registration's private key and webhook
//! secret, and a rotation's new secret or key, are in the answer only: a keyed replay gives
//! them again to the same token alone (the record is the token's, sealed, and the operation is
//! authorized again first; `http/idempotency`).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::Utc;
use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use super::runners::RunnerPoolBody;
use crate::domain::{FieldError, Operation, Timestamp, ValidationErrors};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::http::fields::{OverlapHours, Text, request_body};
use crate::http::idempotency::{Idempotent, Permitted, admin_permission};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{
    AdminPage, Permission, RegisteredRunner, RotatedSecret, RunnerChange, RunnerKeyAdded, Services,
};
use crate::storage::{Runner, RunnerStatus};

/// The longest pool or runner name, in characters (as the service's rule).
const MAX_NAME: usize = 120;
/// Base64 of a 32-byte key is 44 characters; a little room for what a paste adds.
const MAX_PUBLIC_KEY: usize = 64;
/// The longest delivery URL.
const MAX_URL: usize = 2048;

fn public_key(raw: Option<Text<MAX_PUBLIC_KEY>>) -> Result<Option<Vec<u8>>, ValidationErrors> {
    raw.map(|k| {
        STANDARD.decode(k.0.trim()).map_err(|_| {
            FieldError::new(
                "publicKey",
                "must be base64 of a 32-byte Ed25519 public key",
            )
            .into()
        })
    })
    .transpose()
}

request_body! {
    /// Request body of creating a runner pool.
    pub struct CreateRunnerPoolInput {
        /// Unique in the workspace (409 otherwise).
        "name" => name: required Text<MAX_NAME>,
    }
}

#[derive(Debug)]
pub struct NewPool(String);

impl FromJson for NewPool {
    type Body = CreateRunnerPoolInput;

    fn from_body(body: CreateRunnerPoolInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.name.0))
    }
}

impl Permitted for NewPool {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::CreateRunnerPool, req)
    }
}

request_body! {
    /// Request body of registering a runner.
    pub struct RegisterRunnerInput {
        "name" => name: required Text<MAX_NAME>,
        /// Base64 of the runner's 32-byte Ed25519 public key. Without it the server generates
        /// the pair and answers the private key this once; it is never stored.
        "publicKey" => public_key: optional Text<MAX_PUBLIC_KEY>,
        /// Where the runner receives commands: https, or plain http only to a host the server's
        /// `--delivery-http-hosts` lists (loopback in dev). Without it the runner receives
        /// nothing until one is set.
        "url" => url: optional Text<MAX_URL>,
    }
}

#[derive(Debug)]
pub struct NewRunner {
    name: String,
    public_key: Option<Vec<u8>>,
    url: Option<String>,
}

impl FromJson for NewRunner {
    type Body = RegisterRunnerInput;

    fn from_body(body: RegisterRunnerInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            name: body.name.0,
            public_key: public_key(body.public_key)?,
            url: body.url.map(|u| u.0),
        })
    }
}

impl Permitted for NewRunner {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::RegisterRunner, req)
    }
}

request_body! {
    /// Request body of setting a runner's delivery URL.
    pub struct SetRunnerDeliveryUrlInput {
        /// https, or plain http only to a host the server's `--delivery-http-hosts` lists.
        /// Absent: the runner receives nothing until one is set again.
        "url" => url: optional Text<MAX_URL>,
    }
}

#[derive(Debug)]
pub struct DeliveryUrl(Option<String>);

impl FromJson for DeliveryUrl {
    type Body = SetRunnerDeliveryUrlInput;

    fn from_body(body: SetRunnerDeliveryUrlInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.url.map(|u| u.0)))
    }
}

impl Permitted for DeliveryUrl {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::SetRunnerDeliveryUrl, req)
    }
}

request_body! {
    /// Request body of rotating a runner's webhook secret.
    pub struct RotateRunnerWebhookSecretInput {
        /// How long the replaced secret keeps signing beside the new one, in hours, so the
        /// runner can switch in between.
        "overlapHours" => overlap_hours: default OverlapHours,
    }
}

#[derive(Debug)]
pub struct SecretRotation(Duration);

impl FromJson for SecretRotation {
    type Body = RotateRunnerWebhookSecretInput;

    fn from_body(body: RotateRunnerWebhookSecretInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.overlap_hours.duration()))
    }
}

impl Permitted for SecretRotation {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::RotateRunnerWebhookSecret, req)
    }
}

request_body! {
    /// Request body of adding a runner key.
    pub struct AddRunnerKeyInput {
        /// Base64 of a 32-byte Ed25519 public key. Without it the server generates the pair
        /// and answers the private key this once; it is never stored.
        "publicKey" => public_key: optional Text<MAX_PUBLIC_KEY>,
    }
}

#[derive(Debug)]
pub struct NewKey(Option<Vec<u8>>);

impl FromJson for NewKey {
    type Body = AddRunnerKeyInput;

    fn from_body(body: AddRunnerKeyInput) -> Result<Self, ValidationErrors> {
        Ok(Self(public_key(body.public_key)?))
    }
}

impl Permitted for NewKey {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::AddRunnerKey, req)
    }
}

request_body! {
    /// Request body of disabling, enabling or removing a runner, or revoking one of its keys:
    /// an empty object.
    pub struct RunnerActionInput {}
}

/// An empty body, for the operation `O` (whose question a replay asks again).
#[derive(Debug)]
pub struct Action<const O: usize>;

impl<const O: usize> FromJson for Action<O> {
    type Body = RunnerActionInput;

    fn from_body(_: RunnerActionInput) -> Result<Self, ValidationErrors> {
        Ok(Self)
    }
}

impl<const O: usize> Permitted for Action<O> {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::ALL[O], req)
    }
}

pub(super) type DisableAction = Action<{ Operation::DisableRunner as usize }>;
pub(super) type EnableAction = Action<{ Operation::EnableRunner as usize }>;
pub(super) type RemoveAction = Action<{ Operation::RemoveRunner as usize }>;
pub(super) type RevokeKeyAction = Action<{ Operation::RevokeRunnerKey as usize }>;

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct RunnerPoolEnvelope {
    pool: RunnerPoolBody,
}

#[derive(Object)]
#[oai(rename = "RunnerPoolPage", rename_all = "camelCase")]
pub struct RunnerPoolPageBody {
    /// In the order the pools were created; deleted ones included.
    items: Vec<RunnerPoolBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

/// A registration, as the runner's operator needs it. The private key and the webhook secret
/// are shown this once.
#[derive(Object)]
#[oai(rename = "RunnerRegistration", rename_all = "camelCase")]
pub struct RunnerRegistrationBody {
    runner_id: Uuid,
    pool_id: Uuid,
    name: String,
    #[oai(nullable)]
    delivery_url: Option<String>,
    created_at: Timestamp,
    /// The id of the runner's first key: its signed reports name it.
    key_id: Uuid,
    /// Base64 of the generated Ed25519 private key; null when the request gave a public key.
    #[oai(nullable)]
    private_key: Option<String>,
    /// The runner's own Standard Webhooks secret (`whsec_…`): it verifies its dispatches.
    webhook_secret: String,
}

impl From<RegisteredRunner> for RunnerRegistrationBody {
    fn from(r: RegisteredRunner) -> Self {
        Self {
            runner_id: r.runner.id,
            pool_id: r.runner.pool_id,
            name: r.runner.name,
            delivery_url: r.runner.delivery_url,
            created_at: r.runner.created_at.into(),
            key_id: r.key_id,
            private_key: r.private_key.map(|k| STANDARD.encode(k)),
            webhook_secret: r.webhook_secret.whsec(),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct RunnerRegistrationEnvelope {
    registration: RunnerRegistrationBody,
}

#[derive(Object)]
#[oai(rename = "RunnerKeySummary", rename_all = "camelCase")]
pub struct RunnerKeySummaryBody {
    id: Uuid,
    created_at: Timestamp,
    #[oai(nullable)]
    revoked_at: Option<Timestamp>,
}

/// A runner with its health and keys (never a key's or secret's private part).
#[derive(Object)]
#[oai(rename = "RunnerStatus", rename_all = "camelCase")]
pub struct RunnerStatusBody {
    id: Uuid,
    pool_id: Uuid,
    name: String,
    #[oai(nullable)]
    delivery_url: Option<String>,
    /// `enabled`, `held` (by its breaker, until `heldUntil`), `disabled` or `removed`.
    state: String,
    /// `admin`, or `consecutive_failures` when the server disabled it.
    #[oai(nullable)]
    disabled_reason: Option<String>,
    #[oai(nullable)]
    disabled_at: Option<Timestamp>,
    #[oai(nullable)]
    removed_at: Option<Timestamp>,
    #[oai(nullable)]
    held_until: Option<Timestamp>,
    failures_in_a_row: i32,
    #[oai(nullable)]
    failing_since: Option<Timestamp>,
    #[oai(nullable)]
    last_success_at: Option<Timestamp>,
    #[oai(nullable)]
    last_failure_at: Option<Timestamp>,
    created_at: Timestamp,
    /// Oldest first, revoked ones included.
    keys: Vec<RunnerKeySummaryBody>,
}

impl From<RunnerStatus> for RunnerStatusBody {
    fn from(r: RunnerStatus) -> Self {
        let state = if r.removed_at.is_some() {
            "removed"
        } else if r.disabled_at.is_some() {
            "disabled"
        } else if r.held_until.is_some_and(|t| t > Utc::now()) {
            "held"
        } else {
            "enabled"
        };
        Self {
            id: r.id,
            pool_id: r.pool_id,
            name: r.name,
            delivery_url: r.delivery_url,
            state: state.to_owned(),
            disabled_reason: r.disabled_reason,
            disabled_at: r.disabled_at.map(Timestamp::new),
            removed_at: r.removed_at.map(Timestamp::new),
            held_until: r.held_until.map(Timestamp::new),
            failures_in_a_row: r.consecutive_failures,
            failing_since: r
                .failing_since
                .filter(|_| r.consecutive_failures > 0)
                .map(Timestamp::new),
            last_success_at: r.last_success_at.map(Timestamp::new),
            last_failure_at: r.last_failure_at.map(Timestamp::new),
            created_at: r.created_at.into(),
            keys: r
                .keys
                .into_iter()
                .map(|k| RunnerKeySummaryBody {
                    id: k.id,
                    created_at: k.created_at.into(),
                    revoked_at: k.revoked_at.map(Timestamp::new),
                })
                .collect(),
        }
    }
}

#[derive(Object)]
#[oai(rename = "RunnerPage", rename_all = "camelCase")]
pub struct RunnerPageBody {
    /// In the order the runners were registered; removed ones included.
    items: Vec<RunnerStatusBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

#[derive(Object)]
#[oai(rename = "RunnerDeliveryUrl", rename_all = "camelCase")]
pub struct RunnerDeliveryUrlBody {
    runner_id: Uuid,
    /// Null: the runner receives nothing.
    #[oai(nullable)]
    delivery_url: Option<String>,
}

impl From<Runner> for RunnerDeliveryUrlBody {
    fn from(r: Runner) -> Self {
        Self {
            runner_id: r.id,
            delivery_url: r.delivery_url,
        }
    }
}

/// A rotated webhook secret, shown this once.
#[derive(Object)]
#[oai(rename = "RotatedRunnerWebhookSecret", rename_all = "camelCase")]
pub struct RotatedSecretBody {
    runner_id: Uuid,
    /// The new secret (`whsec_…`).
    webhook_secret: String,
    /// Until then the replaced secret signs too; null when there was none.
    #[oai(nullable)]
    previous_secret_retires_at: Option<Timestamp>,
}

impl From<RotatedSecret> for RotatedSecretBody {
    fn from(r: RotatedSecret) -> Self {
        Self {
            runner_id: r.runner_id,
            webhook_secret: r.secret.whsec(),
            previous_secret_retires_at: r.previous_retires_at.map(Timestamp::new),
        }
    }
}

#[derive(Object)]
#[oai(rename = "RunnerStateChange", rename_all = "camelCase")]
pub struct RunnerChangeBody {
    runner_id: Uuid,
    /// `disabled` or `enabled`: the runner's state now.
    state: String,
    /// False when the runner already was so: nothing was written and no event recorded.
    changed: bool,
}

impl RunnerChangeBody {
    fn of(change: RunnerChange, state: &str) -> Self {
        Self {
            runner_id: change.runner_id,
            state: state.to_owned(),
            changed: change.changed,
        }
    }
}

#[derive(Object)]
#[oai(rename = "RemovedRunner", rename_all = "camelCase")]
pub struct RemovedRunnerBody {
    runner_id: Uuid,
    /// Always `removed`.
    state: String,
    keys_revoked: u64,
    /// Its pending deliveries, made due at once for the pool's other runners.
    deliveries_moved: u64,
}

/// A key added, its private key shown this once.
#[derive(Object)]
#[oai(rename = "AddedRunnerKey", rename_all = "camelCase")]
pub struct AddedKeyBody {
    runner_id: Uuid,
    key_id: Uuid,
    /// Base64 of the generated Ed25519 private key; null when the request gave a public key.
    #[oai(nullable)]
    private_key: Option<String>,
}

impl From<RunnerKeyAdded> for AddedKeyBody {
    fn from(k: RunnerKeyAdded) -> Self {
        Self {
            runner_id: k.runner_id,
            key_id: k.key_id,
            private_key: k.private_key.map(|k| STANDARD.encode(k)),
        }
    }
}

#[derive(Object)]
#[oai(rename = "RevokedRunnerKey", rename_all = "camelCase")]
pub struct RevokedKeyBody {
    runner_id: Uuid,
    key_id: Uuid,
    revoked: bool,
}

#[derive(ApiResponse)]
pub enum CreatePoolResponse {
    /// The pool was created.
    #[oai(status = 200)]
    Ok(Json<RunnerPoolEnvelope>),
}

#[derive(ApiResponse)]
pub enum ListPoolsResponse {
    #[oai(status = 200)]
    Ok(Json<RunnerPoolPageBody>),
}

#[derive(ApiResponse)]
pub enum RegisterRunnerResponse {
    /// The runner was registered; its secrets are in this answer only.
    #[oai(status = 200)]
    Ok(Json<RunnerRegistrationEnvelope>),
}

#[derive(ApiResponse)]
pub enum ListRunnersResponse {
    #[oai(status = 200)]
    Ok(Json<RunnerPageBody>),
}

#[derive(ApiResponse)]
pub enum SetUrlResponse {
    #[oai(status = 200)]
    Ok(Json<RunnerDeliveryUrlBody>),
}

#[derive(ApiResponse)]
pub enum RotateSecretResponse {
    /// The new secret, in this answer only.
    #[oai(status = 200)]
    Ok(Json<RotatedSecretBody>),
}

#[derive(ApiResponse)]
pub enum RunnerChangeResponse {
    #[oai(status = 200)]
    Ok(Json<RunnerChangeBody>),
}

#[derive(ApiResponse)]
pub enum RemoveRunnerResponse {
    #[oai(status = 200)]
    Ok(Json<RemovedRunnerBody>),
}

#[derive(ApiResponse)]
pub enum AddKeyResponse {
    /// The key was added; a generated private key is in this answer only.
    #[oai(status = 200)]
    Ok(Json<AddedKeyBody>),
}

#[derive(ApiResponse)]
pub enum RevokeKeyResponse {
    #[oai(status = 200)]
    Ok(Json<RevokedKeyBody>),
}

error_responses!(ReadFleetErrors: 400, 401, 403, 404, 413, 429, 500, 503);
error_responses!(ChangeFleetErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

fn create_runner_pool(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::CreateRunnerPool, ep)
}

fn list_runner_pools(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListRunnerPools, ep)
}

fn register_runner(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RegisterRunner, ep)
}

fn list_runners(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListRunners, ep)
}

fn set_runner_delivery_url(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::SetRunnerDeliveryUrl, ep)
}

fn rotate_runner_webhook_secret(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RotateRunnerWebhookSecret, ep)
}

fn disable_runner(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::DisableRunner, ep)
}

fn enable_runner(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::EnableRunner, ep)
}

fn remove_runner(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RemoveRunner, ep)
}

fn add_runner_key(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::AddRunnerKey, ep)
}

fn revoke_runner_key(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RevokeRunnerKey, ep)
}

fn page_of(limit: Option<i64>, cursor: Option<String>) -> Result<AdminPage, ValidationErrors> {
    AdminPage::parse(limit, cursor.as_deref()).map_err(Into::into)
}

pub struct FleetApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Admin")]
impl FleetApi {
    /// Create a runner pool
    ///
    /// Requires `admin:write` and a user who administers the organisation. A workspace of
    /// another organisation is a 404 like an unknown one.
    #[oai(
        path = "/organisations/:organisationId/workspaces/:workspaceId/runner-pools",
        method = "post",
        operation_id = "createRunnerPool",
        transform = "create_runner_pool"
    )]
    async fn create_pool(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        body: Idempotent<JsonBody<NewPool>>,
    ) -> Result<CreatePoolResponse, ChangeFleetErrors> {
        let NewPool(name) = body.input.value;
        let pool = services
            .admin_create_pool(&auth.0, &organisation_id, &workspace_id, &name, &body.write)
            .await?;
        let envelope = RunnerPoolEnvelope { pool: pool.into() };
        Ok(CreatePoolResponse::Ok(Json(envelope)))
    }

    /// List a workspace's runner pools
    ///
    /// Requires `admin:read` and a user who administers the organisation. In the order they
    /// were created, deleted ones included, at most `limit` per page.
    #[oai(
        path = "/organisations/:organisationId/workspaces/:workspaceId/runner-pools",
        method = "get",
        operation_id = "listRunnerPools",
        transform = "list_runner_pools"
    )]
    async fn list_pools(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListPoolsResponse, ReadFleetErrors> {
        let page = page_of(limit.0, cursor.0).map_err(ApiFailure::from)?;
        let page = services
            .admin_list_pools(&auth.0, &organisation_id, &workspace_id, page)
            .await?;
        Ok(ListPoolsResponse::Ok(Json(RunnerPoolPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }

    /// Register a runner
    ///
    /// Requires `admin:write` and a user who administers the organisation. Answers the
    /// runner's webhook secret (`whsec_…`) and, when no public key was given, a generated
    /// Ed25519 private key: this once. The server keeps the secret sealed and only the public
    /// key; a keyed repeat answers them again to the same token only. A pool of another
    /// organisation is a 404; a deleted pool a 409 `pool_deleted`.
    #[oai(
        path = "/organisations/:organisationId/runner-pools/:poolId/runners",
        method = "post",
        operation_id = "registerRunner",
        transform = "register_runner"
    )]
    async fn register(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "poolId")] pool_id: Path<String>,
        body: Idempotent<JsonBody<NewRunner>>,
    ) -> Result<RegisterRunnerResponse, ChangeFleetErrors> {
        let NewRunner {
            name,
            public_key,
            url,
        } = body.input.value;
        let registered = services
            .admin_register_runner(
                &auth.0,
                &organisation_id,
                &pool_id,
                &name,
                public_key.as_deref(),
                url.as_deref(),
                &body.write,
            )
            .await?;
        let envelope = RunnerRegistrationEnvelope {
            registration: registered.into(),
        };
        Ok(RegisterRunnerResponse::Ok(Json(envelope)))
    }

    /// List a pool's runners
    ///
    /// Requires `admin:read` and a user who administers the organisation. Each runner with its
    /// state, failures in a row, last success and failure, and keys (never a private part); in
    /// the order they were registered, removed ones included.
    #[oai(
        path = "/organisations/:organisationId/runner-pools/:poolId/runners",
        method = "get",
        operation_id = "listRunners",
        transform = "list_runners"
    )]
    async fn list_runners(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "poolId")] pool_id: Path<String>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListRunnersResponse, ReadFleetErrors> {
        let page = page_of(limit.0, cursor.0).map_err(ApiFailure::from)?;
        let page = services
            .admin_list_runners(&auth.0, &organisation_id, &pool_id, page)
            .await?;
        Ok(ListRunnersResponse::Ok(Json(RunnerPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }

    /// Set a runner's delivery URL
    ///
    /// Requires `admin:write` and a user who administers the organisation. The server's egress
    /// rule decides which URLs are allowed (https, or http to a host its
    /// `--delivery-http-hosts` lists); a refused one is a 400 on `url`. Without `url` the
    /// runner receives nothing. Its failures so far are forgotten.
    #[oai(
        path = "/organisations/:organisationId/runners/:runnerId/delivery-url",
        method = "put",
        operation_id = "setRunnerDeliveryUrl",
        transform = "set_runner_delivery_url"
    )]
    async fn set_url(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "runnerId")] runner_id: Path<String>,
        body: Idempotent<JsonBody<DeliveryUrl>>,
    ) -> Result<SetUrlResponse, ChangeFleetErrors> {
        let DeliveryUrl(url) = body.input.value;
        let runner = services
            .admin_set_runner_url(
                &auth.0,
                &organisation_id,
                &runner_id,
                url.as_deref(),
                &body.write,
            )
            .await?;
        Ok(SetUrlResponse::Ok(Json(runner.into())))
    }

    /// Rotate a runner's webhook secret
    ///
    /// Requires `admin:write` and a user who administers the organisation. Answers the new
    /// secret this once; dispatches are signed with both the new and the replaced secret until
    /// `previousSecretRetiresAt` (`overlapHours` from now), so the runner can switch in between.
    #[oai(
        path = "/organisations/:organisationId/runners/:runnerId/webhook-secret/rotate",
        method = "post",
        operation_id = "rotateRunnerWebhookSecret",
        transform = "rotate_runner_webhook_secret"
    )]
    async fn rotate_secret(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "runnerId")] runner_id: Path<String>,
        body: Idempotent<JsonBody<SecretRotation>>,
    ) -> Result<RotateSecretResponse, ChangeFleetErrors> {
        let SecretRotation(overlap) = body.input.value;
        let rotated = services
            .admin_rotate_runner_secret(&auth.0, &organisation_id, &runner_id, overlap, &body.write)
            .await?;
        Ok(RotateSecretResponse::Ok(Json(rotated.into())))
    }

    /// Disable a runner
    ///
    /// Requires `admin:write` and a user who administers the organisation. The runner is no
    /// longer chosen for deliveries (reason `admin`) until enabled; a disabled one stays so
    /// (`changed: false`). A removed runner is a 409.
    #[oai(
        path = "/organisations/:organisationId/runners/:runnerId/disable",
        method = "post",
        operation_id = "disableRunner",
        transform = "disable_runner"
    )]
    async fn disable(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "runnerId")] runner_id: Path<String>,
        body: Idempotent<JsonBody<DisableAction>>,
    ) -> Result<RunnerChangeResponse, ChangeFleetErrors> {
        let change = services
            .admin_disable_runner(&auth.0, &organisation_id, &runner_id, &body.write)
            .await?;
        Ok(RunnerChangeResponse::Ok(Json(RunnerChangeBody::of(
            change, "disabled",
        ))))
    }

    /// Enable a runner
    ///
    /// Requires `admin:write` and a user who administers the organisation. A disabled runner is
    /// chosen again, its failures forgotten. A removed runner is a 409.
    #[oai(
        path = "/organisations/:organisationId/runners/:runnerId/enable",
        method = "post",
        operation_id = "enableRunner",
        transform = "enable_runner"
    )]
    async fn enable(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "runnerId")] runner_id: Path<String>,
        body: Idempotent<JsonBody<EnableAction>>,
    ) -> Result<RunnerChangeResponse, ChangeFleetErrors> {
        let change = services
            .admin_enable_runner(&auth.0, &organisation_id, &runner_id, &body.write)
            .await?;
        Ok(RunnerChangeResponse::Ok(Json(RunnerChangeBody::of(
            change, "enabled",
        ))))
    }

    /// Remove a runner
    ///
    /// Requires `admin:write` and a user who administers the organisation. For good: its keys
    /// are revoked (its signed reports are refused) and its pending deliveries go to another
    /// runner of the pool. A removed runner is a 409 (`invalid_state`).
    #[oai(
        path = "/organisations/:organisationId/runners/:runnerId",
        method = "delete",
        operation_id = "removeRunner",
        transform = "remove_runner"
    )]
    async fn remove(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "runnerId")] runner_id: Path<String>,
        body: Idempotent<JsonBody<RemoveAction>>,
    ) -> Result<RemoveRunnerResponse, ChangeFleetErrors> {
        let (runner_id, removed) = services
            .admin_remove_runner(&auth.0, &organisation_id, &runner_id, &body.write)
            .await?;
        Ok(RemoveRunnerResponse::Ok(Json(RemovedRunnerBody {
            runner_id,
            state: "removed".into(),
            keys_revoked: removed.keys_revoked,
            deliveries_moved: removed.deliveries_moved,
        })))
    }

    /// Add a runner key
    ///
    /// Requires `admin:write` and a user who administers the organisation. For a key rotation:
    /// the runner signs with either key until the old one is revoked. Without `publicKey` the
    /// server generates the pair and answers the private key this once. A removed runner is a
    /// 409.
    #[oai(
        path = "/organisations/:organisationId/runners/:runnerId/keys",
        method = "post",
        operation_id = "addRunnerKey",
        transform = "add_runner_key"
    )]
    async fn add_key(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "runnerId")] runner_id: Path<String>,
        body: Idempotent<JsonBody<NewKey>>,
    ) -> Result<AddKeyResponse, ChangeFleetErrors> {
        let NewKey(public) = body.input.value;
        let added = services
            .admin_add_runner_key(
                &auth.0,
                &organisation_id,
                &runner_id,
                public.as_deref(),
                &body.write,
            )
            .await?;
        Ok(AddKeyResponse::Ok(Json(added.into())))
    }

    /// Revoke a runner key
    ///
    /// Requires `admin:write` and a user who administers the organisation. Reports signed with
    /// it are refused from now on. A key that is not a live key of the runner is a 404.
    #[oai(
        path = "/organisations/:organisationId/runners/:runnerId/keys/:keyId",
        method = "delete",
        operation_id = "revokeRunnerKey",
        transform = "revoke_runner_key"
    )]
    async fn revoke_key(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "runnerId")] runner_id: Path<String>,
        #[oai(name = "keyId")] key_id: Path<String>,
        body: Idempotent<JsonBody<RevokeKeyAction>>,
    ) -> Result<RevokeKeyResponse, ChangeFleetErrors> {
        services
            .admin_revoke_runner_key(&auth.0, &organisation_id, &runner_id, &key_id, &body.write)
            .await?;
        Ok(RevokeKeyResponse::Ok(Json(RevokedKeyBody {
            runner_id: parse_id(&runner_id),
            key_id: parse_id(&key_id),
            revoked: true,
        })))
    }
}

/// An id the service has already accepted.
fn parse_id(raw: &str) -> Uuid {
    crate::domain::parse_uuid(raw).unwrap_or_default()
}
