//! The instance's policies and webhook signing keys on the admin plane, an operator's:
//! `/v1/policies` (install, list), `/v1/policies/{policyName}/versions/{version}` (show,
//! activate, remove), rollback, shadow and its disagreements, the decision log, and
//! `/v1/webhook-signing-keys`. Thin: the rules are `service/policies.rs` and
//! `service/policy_budgets.rs`'s.
//!
//! An install's body is the component itself ([`Component`]), read under the route's own body
//! limit (`--policy-upload-max-mib`, `http/context.rs`), and shared, never copied, on its way
//! to the compiler and the store; its parameters are the query's, and its cases a header.

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use poem::web::Data;
use poem::{Endpoint, Request, RequestBody};
use poem_openapi::param::{Header, Path, Query};
use poem_openapi::payload::{Json, ParsePayload, Payload};
use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
use poem_openapi::{ApiResponse, Object, OpenApi, impl_apirequest_for_payload};
use sha2::Digest;
use uuid::Uuid;

use super::ApiTags;
use crate::domain::{Actor, FieldError, Operation, Timestamp, ValidationErrors, WebhookPublicKey};
use crate::http::admission::admitted;
use crate::http::auth::{AuthOutcome, BearerAuth, token_subject};
use crate::http::context::BodyLimit;
use crate::http::error::{ApiFailure, error_responses};
use crate::http::fields::{PolicyReference, request_body};
use crate::http::idempotency::{Idempotent, IdempotentInput, Permitted, admin_permission};
use crate::http::payload::{FromJson, JsonBody};
use crate::policy::{BudgetReport, DecisionOutcome, Instances, MemoryBudget, PolicyKind};
use crate::service::{
    ActivatedPolicy, AdminPage, DecisionListing, Permission, PolicyUpload, PolicyUploadAdmission,
    Services,
};
use crate::storage::{DisagreementRecord, PolicyDecisionRecord, PolicyRecord};

/// The header that carries an install's own cases: the cases file, base64url.
pub const CASES_HEADER: &str = "policy-cases";
/// The most cases an install's header carries, decoded (a header, not a body).
pub const MAX_CASES_BYTES: usize = 64 * 1024;

/// An install's body: a policy component (`application/wasm`, or `application/octet-stream`).
pub struct Component {
    pub bytes: Bytes,
    /// SHA-256 of the install's query and cases header, then of the bytes: the idempotency
    /// fingerprint, so a replay with other parameters is not taken for the same install.
    digest: [u8; 32],
}

impl Payload for Component {
    // The document names `application/octet-stream`, which every client generator takes as a
    // file (openapi-python-client refuses `application/wasm`); `application/wasm` is accepted.
    const CONTENT_TYPE: &'static str = "application/octet-stream";

    fn check_content_type(content_type: &str) -> bool {
        content_type.parse::<mime::Mime>().is_ok_and(|m| {
            m.type_() == mime::APPLICATION
                && (m.subtype() == "wasm" || m.subtype() == mime::OCTET_STREAM)
        })
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema::new_with_format("string", "binary")))
    }
}

impl ParsePayload for Component {
    const IS_REQUIRED: bool = true;

    async fn from_request(request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        let limit = request.data::<BodyLimit>().map_or(1024 * 1024, |l| l.0);
        let bytes = body
            .take()
            .map_err(|_| ApiFailure::internal())?
            .into_bytes_limit(limit)
            .await
            .map_err(|e| match e {
                poem::error::ReadBodyError::PayloadTooLarge => ApiFailure::payload_too_large(limit),
                _ => ApiFailure::new(
                    poem::http::StatusCode::BAD_REQUEST,
                    "invalid_body",
                    "the request body could not be read",
                ),
            })?;
        if bytes.is_empty() {
            return Err(ApiFailure::validation(
                &FieldError::new("body", "a policy component is required").into(),
            )
            .into());
        }
        let mut parameters: Vec<(String, String)> = request
            .uri()
            .query()
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .into_owned()
                    .collect()
            })
            .unwrap_or_default();
        parameters.sort();
        let mut digest = sha2::Sha256::new();
        for (name, value) in &parameters {
            for part in [name.as_bytes(), b"\0", value.as_bytes(), b"\0"] {
                digest.update(part);
            }
        }
        for cases in request.headers().get_all(CASES_HEADER) {
            digest.update(cases.as_bytes());
            digest.update(b"\0");
        }
        digest.update(&bytes);
        Ok(Self {
            bytes,
            digest: digest.finalize().into(),
        })
    }
}

impl_apirequest_for_payload!(Component);

fn authenticated(req: &Request) -> Option<&crate::domain::Principal> {
    match req.data::<AuthOutcome>()? {
        AuthOutcome::Authenticated(principal) => Some(principal),
        AuthOutcome::Failed(_) => None,
    }
}

/// A bearer-authenticated upload, as a [`JsonBody`] is.
impl IdempotentInput for Component {
    fn principal(&self, req: &Request) -> Option<String> {
        authenticated(req).map(token_subject)
    }

    fn quota_owner(&self, req: &Request) -> Option<String> {
        authenticated(req).map(|p| format!("user:{}", p.user_id))
    }

    fn body_digest(&self) -> [u8; 32] {
        self.digest
    }

    fn permission<'a>(&'a self, req: &'a Request) -> Option<Permission<'a>> {
        Some(admin_permission(Operation::InstallPolicy, req))
    }

    fn actor(&self, req: &Request) -> Option<Actor> {
        authenticated(req).map(|p| Actor::user(p.user_id, p.token_id))
    }
}

fn field_error(field: &str, reason: impl Into<String>) -> ValidationErrors {
    FieldError::new(field, reason).into()
}

fn kind_of(field: &str, raw: &str) -> Result<PolicyKind, FieldError> {
    PolicyKind::parse(raw).map_err(|reason| FieldError::new(field, reason))
}

/// The `Policy-Cases` header: base64url (padded or not) of a UTF-8 cases file.
fn cases_of(raw: Option<&str>) -> Result<Option<String>, ValidationErrors> {
    let Some(raw) = raw else { return Ok(None) };
    let encoded = raw.trim().trim_end_matches('=');
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| field_error("Policy-Cases", "must be base64url"))?;
    if bytes.len() > MAX_CASES_BYTES {
        return Err(field_error(
            "Policy-Cases",
            format!("must decode to at most {MAX_CASES_BYTES} bytes"),
        ));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| field_error("Policy-Cases", "must decode to UTF-8"))
}

request_body! {
    /// Request body of an activation.
    pub struct ActivatePolicyInput {
        /// Activate a version over its measured budgets all the same (recorded with the
        /// activation and in its audit event).
        "force" => force: default bool,
    }
}

#[derive(Debug)]
pub struct Activation {
    force: bool,
}

impl FromJson for Activation {
    type Body = ActivatePolicyInput;

    fn from_body(body: ActivatePolicyInput) -> Result<Self, ValidationErrors> {
        Ok(Self { force: body.force })
    }
}

impl Permitted for Activation {
    fn permission<'a>(&'a self, req: &'a Request) -> Permission<'a> {
        admin_permission(Operation::ActivatePolicy, req)
    }
}

request_body! {
    /// Request body of removing a version: an empty object.
    pub struct RemovePolicyInput {}
}

#[derive(Debug)]
pub struct Removal;

impl FromJson for Removal {
    type Body = RemovePolicyInput;

    fn from_body(_: RemovePolicyInput) -> Result<Self, ValidationErrors> {
        Ok(Self)
    }
}

impl Permitted for Removal {
    fn permission<'a>(&'a self, req: &'a Request) -> Permission<'a> {
        admin_permission(Operation::RemovePolicy, req)
    }
}

request_body! {
    /// Request body of a rollback.
    pub struct RollBackPolicyInput {
        /// The kind to roll back.
        "kind" => kind: required PolicyKind,
    }
}

#[derive(Debug)]
pub struct Rollback(PolicyKind);

impl FromJson for Rollback {
    type Body = RollBackPolicyInput;

    fn from_body(body: RollBackPolicyInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.kind))
    }
}

impl Permitted for Rollback {
    fn permission<'a>(&'a self, req: &'a Request) -> Permission<'a> {
        admin_permission(Operation::RollBackPolicy, req)
    }
}

request_body! {
    /// Request body of setting the shadow authorizer: the version to shadow, or no `policy` to
    /// stop.
    pub struct SetShadowPolicyInput {
        /// The authorizer version, `NAME@VERSION`.
        "policy" => policy: optional PolicyReference,
    }
}

#[derive(Debug)]
pub struct Shadow(Option<PolicyReference>);

impl FromJson for Shadow {
    type Body = SetShadowPolicyInput;

    fn from_body(body: SetShadowPolicyInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.policy))
    }
}

impl Permitted for Shadow {
    fn permission<'a>(&'a self, req: &'a Request) -> Permission<'a> {
        admin_permission(Operation::SetShadowPolicy, req)
    }
}

#[derive(Object)]
#[oai(rename = "Policy", rename_all = "camelCase")]
pub struct PolicyBody {
    id: Uuid,
    name: String,
    /// `authorizer` or `moderator`.
    kind: String,
    version: i32,
    /// `name@version`, as cpctl names a version.
    reference: String,
    /// SHA-256 of the component.
    digest: String,
    /// The component's size.
    size_bytes: i64,
    created_at: Timestamp,
    // Described by its schema: a description here would wrap the reference in an `allOf`.
    instances: Instances,
}

impl From<PolicyRecord> for PolicyBody {
    fn from(p: PolicyRecord) -> Self {
        Self {
            id: p.id,
            reference: format!("{}@{}", p.name, p.version),
            name: p.name,
            kind: p.kind,
            version: p.version,
            digest: p.digest,
            size_bytes: p.size,
            created_at: p.created_at.into(),
            instances: p.instances,
        }
    }
}

/// A version's measurement: decisions on its cases in fresh instances under its memory budget.
#[derive(Object)]
#[oai(rename = "PolicyBudget", rename_all = "camelCase")]
pub struct BudgetBody {
    decisions: u32,
    failures: u32,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// This server's decision deadline.
    deadline_ms: u64,
    peak_memory_bytes: u64,
    memory_budget_mib: u64,
    /// Why the version is over its budgets; null when it is within them.
    #[oai(nullable)]
    over_budget: Option<String>,
}

impl From<BudgetReport> for BudgetBody {
    fn from(b: BudgetReport) -> Self {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        Self {
            decisions: b.decisions,
            failures: b.failures,
            p50_ms: ms(b.p50),
            p99_ms: ms(b.p99),
            max_ms: ms(b.max),
            deadline_ms: b.deadline.as_millis() as u64,
            peak_memory_bytes: b.peak_memory_bytes,
            memory_budget_mib: u64::from(b.memory_budget.mib()),
            over_budget: b.over_budget(),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct InstalledPolicyEnvelope {
    policy: PolicyBody,
    budget: BudgetBody,
}

/// What is in force; a kind absent: its built-in default (`shadow` absent: none). Absent
/// rather than null: a nullable reference needs an `allOf`, which client generators refuse.
#[derive(Object)]
#[oai(rename = "ActivePolicies", rename_all = "camelCase")]
pub struct ActiveBody {
    #[oai(skip_serializing_if_is_none)]
    authorizer: Option<PolicyBody>,
    #[oai(skip_serializing_if_is_none)]
    moderator: Option<PolicyBody>,
    #[oai(skip_serializing_if_is_none)]
    shadow: Option<PolicyBody>,
}

#[derive(Object)]
#[oai(rename = "PolicyPage", rename_all = "camelCase")]
pub struct PolicyPageBody {
    /// By name, then version.
    items: Vec<PolicyBody>,
    #[oai(nullable)]
    next_cursor: Option<String>,
    active: ActiveBody,
}

/// A version and its measurement (`budget` absent for a version installed before versions
/// were measured).
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct PolicyDetailEnvelope {
    policy: PolicyBody,
    #[oai(skip_serializing_if_is_none)]
    budget: Option<BudgetBody>,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ActivatedPolicyEnvelope {
    policy: PolicyBody,
    forced: bool,
    /// Why the measurement would have refused it, when forced over it.
    #[oai(nullable)]
    over_budget: Option<String>,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct RemovedPolicyEnvelope {
    policy: PolicyBody,
}

/// The kind rolled back and what is active now (`active` absent: the built-in default).
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct RolledBackEnvelope {
    kind: String,
    #[oai(skip_serializing_if_is_none)]
    active: Option<PolicyBody>,
}

/// The authorizer now in shadow (`shadow` absent: none).
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ShadowEnvelope {
    #[oai(skip_serializing_if_is_none)]
    shadow: Option<PolicyBody>,
}

#[derive(Object)]
#[oai(rename = "ShadowDisagreement", rename_all = "camelCase")]
pub struct DisagreementBody {
    shadow_digest: String,
    operation: String,
    principal_id: String,
    active_decision: String,
    shadow_decision: String,
    occurred_at: Timestamp,
}

impl From<DisagreementRecord> for DisagreementBody {
    fn from(d: DisagreementRecord) -> Self {
        Self {
            shadow_digest: d.shadow_digest,
            operation: d.operation,
            principal_id: d.principal_id,
            active_decision: d.active_decision,
            shadow_decision: d.shadow_decision,
            occurred_at: d.occurred_at.into(),
        }
    }
}

#[derive(Object)]
#[oai(rename = "ShadowDisagreementPage", rename_all = "camelCase")]
pub struct DisagreementPageBody {
    /// Newest first.
    items: Vec<DisagreementBody>,
    #[oai(nullable)]
    next_cursor: Option<String>,
}

#[derive(Object)]
#[oai(rename = "PolicyDecision", rename_all = "camelCase")]
pub struct DecisionBody {
    occurred_at: Timestamp,
    kind: String,
    operation: String,
    outcome: String,
    #[oai(nullable)]
    failure: Option<String>,
    #[oai(nullable)]
    reason: Option<String>,
    /// `name@version`; version 0 is the built-in default.
    policy: String,
    policy_digest: String,
    latency_micros: i64,
    #[oai(nullable)]
    correlation_id: Option<String>,
    #[oai(nullable)]
    organisation_id: Option<Uuid>,
    #[oai(nullable)]
    workspace_id: Option<Uuid>,
}

impl From<PolicyDecisionRecord> for DecisionBody {
    fn from(d: PolicyDecisionRecord) -> Self {
        Self {
            occurred_at: Timestamp::new(d.occurred_at),
            kind: d.kind,
            operation: d.operation,
            outcome: d.outcome,
            failure: d.failure,
            reason: d.reason,
            policy: format!("{}@{}", d.policy_name, d.policy_version),
            policy_digest: d.policy_digest,
            latency_micros: d.latency_us,
            correlation_id: d.correlation_id,
            organisation_id: d.organisation_id,
            workspace_id: d.workspace_id,
        }
    }
}

#[derive(Object)]
#[oai(rename = "PolicyDecisionPage", rename_all = "camelCase")]
pub struct DecisionPageBody {
    /// Newest first.
    items: Vec<DecisionBody>,
    #[oai(nullable)]
    next_cursor: Option<String>,
}

#[derive(Object)]
#[oai(rename = "WebhookSigningKey", rename_all = "camelCase")]
pub struct WebhookKeyBody {
    /// Key id, as webhooks name the key that signed them.
    kid: String,
    /// The first configured key, which signs; the others verify during a rotation's overlap.
    current: bool,
    /// `whpk_<base64>`, the Standard Webhooks form.
    public_key: String,
    /// The JWK `x` (base64url), as /.well-known/jwks.json publishes it.
    x: String,
}

impl From<WebhookPublicKey> for WebhookKeyBody {
    fn from(k: WebhookPublicKey) -> Self {
        Self {
            public_key: k.whpk(),
            x: k.x(),
            kid: k.kid,
            current: k.current,
        }
    }
}

#[derive(Object)]
#[oai(rename = "WebhookSigningKeyPage", rename_all = "camelCase")]
pub struct WebhookKeyPageBody {
    /// Current first.
    items: Vec<WebhookKeyBody>,
    #[oai(nullable)]
    next_cursor: Option<String>,
}

#[derive(ApiResponse)]
pub enum InstallPolicyResponse {
    /// The version was stored with its measurement.
    #[oai(status = 200)]
    Ok(Json<InstalledPolicyEnvelope>),
}

#[derive(ApiResponse)]
pub enum ListPoliciesResponse {
    #[oai(status = 200)]
    Ok(Json<PolicyPageBody>),
}

#[derive(ApiResponse)]
pub enum GetPolicyResponse {
    #[oai(status = 200)]
    Ok(Json<PolicyDetailEnvelope>),
}

#[derive(ApiResponse)]
pub enum ActivatePolicyResponse {
    /// The version is the active policy of its kind; replicas load it within a second.
    #[oai(status = 200)]
    Ok(Json<ActivatedPolicyEnvelope>),
}

#[derive(ApiResponse)]
pub enum RemovePolicyResponse {
    #[oai(status = 200)]
    Ok(Json<RemovedPolicyEnvelope>),
}

#[derive(ApiResponse)]
pub enum RollBackPolicyResponse {
    #[oai(status = 200)]
    Ok(Json<RolledBackEnvelope>),
}

#[derive(ApiResponse)]
pub enum SetShadowPolicyResponse {
    #[oai(status = 200)]
    Ok(Json<ShadowEnvelope>),
}

#[derive(ApiResponse)]
pub enum ListDisagreementsResponse {
    #[oai(status = 200)]
    Ok(Json<DisagreementPageBody>),
}

#[derive(ApiResponse)]
pub enum ListDecisionsResponse {
    #[oai(status = 200)]
    Ok(Json<DecisionPageBody>),
}

#[derive(ApiResponse)]
pub enum ListWebhookKeysResponse {
    #[oai(status = 200)]
    Ok(Json<WebhookKeyPageBody>),
}

error_responses!(InstallPolicyErrors: 400, 401, 403, 409, 413, 422, 429, 500, 503);
error_responses!(ReadPoliciesErrors: 400, 401, 403, 404, 429, 500, 503);
error_responses!(ChangePolicyErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

/// Admission, then the upload's own: whether the caller may install at all is asked before
/// its body (up to `--policy-upload-max-mib`) is read.
fn install_policy(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::InstallPolicy, AdmitUpload(ep))
}

/// Asks the service whether the caller admission authenticated may install
/// ([`Services::admit_policy_upload`]) and hands its admission to the handler. A caller with no
/// valid token goes on to `BearerAuth`'s 401, which the handler's extractors also give before
/// the body is read.
struct AdmitUpload<E>(E);

impl<E: Endpoint> Endpoint for AdmitUpload<E> {
    type Output = poem::Response;

    async fn call(&self, mut req: Request) -> poem::Result<poem::Response> {
        if let Some(principal) = authenticated(&req).cloned() {
            let services = req
                .data::<Arc<Services>>()
                .cloned()
                .ok_or_else(ApiFailure::internal)?;
            let admission = services
                .admit_policy_upload(&principal)
                .await
                .map_err(ApiFailure::from)?;
            req.set_data(admission);
        }
        self.0
            .call(req)
            .await
            .map(poem::IntoResponse::into_response)
    }
}

fn list_policies(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListPolicies, ep)
}

fn get_policy(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::GetPolicy, ep)
}

fn activate_policy(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ActivatePolicy, ep)
}

fn remove_policy(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RemovePolicy, ep)
}

fn roll_back_policy(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RollBackPolicy, ep)
}

fn set_shadow_policy(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::SetShadowPolicy, ep)
}

fn list_shadow_disagreements(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListShadowDisagreements, ep)
}

fn list_policy_decisions(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListPolicyDecisions, ep)
}

fn list_webhook_signing_keys(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListWebhookSigningKeys, ep)
}

fn page_of(limit: Option<i64>) -> Result<AdminPage, ValidationErrors> {
    AdminPage::parse(limit, None).map_err(Into::into)
}

fn activated(a: ActivatedPolicy, forced: bool) -> ActivatedPolicyEnvelope {
    ActivatedPolicyEnvelope {
        policy: a.policy.into(),
        forced,
        over_budget: a.overridden,
    }
}

pub struct PoliciesApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Admin")]
impl PoliciesApi {
    /// Install a policy component
    ///
    /// Requires `admin:write` and an operator. The body is the component itself
    /// (`application/octet-stream`, or `application/wasm`), at most `--policy-upload-max-mib`
    /// (64 MiB by default; 413 past it); `kind`, `name`, `memoryMib`, `force` and
    /// `instances` are query parameters, and cases to measure with, when not the shipped
    /// cases of the kind, go base64url in the `Policy-Cases` header (at most 64 KiB
    /// decoded). The server compiles the component, checks it implements the kind's world,
    /// and measures it (200 decisions in fresh instances under its memory budget, against
    /// this server's deadline) before storing it as the next version of `name`, with its
    /// instances mode (`fresh` unless `per-organisation`). Refused with 422 and its own
    /// code: not a component (`malformed_component`), not of the kind's world
    /// (`wrong_world`), or over its budgets (`over_budget`, with the measurement;
    /// `force=true` stores it all the same, and its activation will still need `force`).
    /// Audited as `policy.installed` in the operator's organisation; the component's bytes
    /// never are.
    #[oai(
        path = "/policies",
        method = "post",
        operation_id = "installPolicy",
        transform = "install_policy"
    )]
    #[allow(clippy::too_many_arguments, reason = "the install's parameters")]
    async fn install(
        &self,
        _auth: BearerAuth,
        services: Data<&Arc<Services>>,
        /// `authorizer` or `moderator`.
        kind: Query<String>,
        /// The policy's name, 1 to 100 of `[A-Za-z0-9._-]`; the version is the next of it.
        name: Query<String>,
        /// This version's memory budget in MiB (default: the server's).
        #[oai(name = "memoryMib")]
        memory_mib: Query<Option<u64>>,
        /// Store it even over its budgets (recorded).
        force: Query<Option<bool>>,
        /// `fresh` (default): a new instance for every decision; `per-organisation`: warm
        /// instances, each serving the decisions of one organisation only.
        instances: Query<Option<String>>,
        /// The cases to measure with: a cases file, base64url.
        #[oai(name = "Policy-Cases")]
        cases: Header<Option<String>>,
        admitted: Data<&PolicyUploadAdmission>,
        body: Idempotent<Component>,
    ) -> Result<InstallPolicyResponse, InstallPolicyErrors> {
        let kind = kind_of("kind", &kind.0).map_err(|e| ApiFailure::validation(&e.into()))?;
        let instances = match instances.0.as_deref() {
            None => Instances::Fresh,
            Some(raw) => Instances::parse(raw)
                .map_err(|reason| ApiFailure::from(field_error("instances", reason)))?,
        };
        let memory = match memory_mib.0 {
            None => None,
            Some(mib) => Some(
                MemoryBudget::from_mib(mib)
                    .map_err(|reason| ApiFailure::from(field_error("memoryMib", reason)))?,
            ),
        };
        let upload = PolicyUpload {
            name: name.0,
            kind,
            component: body.input.bytes,
            memory,
            cases: cases_of(cases.0.as_deref()).map_err(ApiFailure::from)?,
            force: force.0.unwrap_or(false),
            instances,
        };
        let installed = services
            .admin_install_policy(&admitted, upload, &body.write)
            .await?;
        Ok(InstallPolicyResponse::Ok(Json(InstalledPolicyEnvelope {
            policy: installed.policy.into(),
            budget: installed.budget.into(),
        })))
    }

    /// List policy versions
    ///
    /// Requires `admin:read` and an operator. Every stored version by name then version, at
    /// most `limit` per page, with what is active and in shadow.
    #[oai(
        path = "/policies",
        method = "get",
        operation_id = "listPolicies",
        transform = "list_policies"
    )]
    async fn list(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListPoliciesResponse, ReadPoliciesErrors> {
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let listing = services.admin_list_policies(&auth.0, page).await?;
        let state = listing.state;
        Ok(ListPoliciesResponse::Ok(Json(PolicyPageBody {
            items: listing.page.items.into_iter().map(Into::into).collect(),
            next_cursor: listing.page.next_cursor,
            active: ActiveBody {
                authorizer: state.authorizer.map(Into::into),
                moderator: state.moderator.map(Into::into),
                shadow: state.shadow.map(Into::into),
            },
        })))
    }

    /// Show a policy version
    ///
    /// Requires `admin:read` and an operator. The version and its measurement, judged against
    /// this server's deadline now.
    #[oai(
        path = "/policies/:policyName/versions/:version",
        method = "get",
        operation_id = "getPolicy",
        transform = "get_policy"
    )]
    async fn show(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "policyName")] name: Path<String>,
        version: Path<String>,
    ) -> Result<GetPolicyResponse, ReadPoliciesErrors> {
        let (policy, budget) = services.admin_get_policy(&auth.0, &name, &version).await?;
        Ok(GetPolicyResponse::Ok(Json(PolicyDetailEnvelope {
            policy: policy.into(),
            budget: budget.map(Into::into),
        })))
    }

    /// Activate a policy version
    ///
    /// Requires `admin:write` and an operator. The version becomes the active policy of its
    /// kind on every replica (within a second). Refused (409 `over_budget`) when its measured
    /// p99 reaches this server's deadline or its peak memory exceeded its budget, unless
    /// `force` (recorded with the activation). Audited as `policy.activated`.
    #[oai(
        path = "/policies/:policyName/versions/:version/activate",
        method = "post",
        operation_id = "activatePolicy",
        transform = "activate_policy"
    )]
    async fn activate(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "policyName")] name: Path<String>,
        version: Path<String>,
        body: Idempotent<JsonBody<Activation>>,
    ) -> Result<ActivatePolicyResponse, ChangePolicyErrors> {
        let force = body.input.value.force;
        let done = services
            .admin_activate_policy(&auth.0, &name, &version, force, &body.write)
            .await?;
        Ok(ActivatePolicyResponse::Ok(Json(activated(done, force))))
    }

    /// Remove a policy version
    ///
    /// Requires `admin:write` and an operator. Only a version never activated and not in
    /// shadow (409 otherwise: it stays for rollback and audit). Audited as `policy.removed`.
    #[oai(
        path = "/policies/:policyName/versions/:version",
        method = "delete",
        operation_id = "removePolicy",
        transform = "remove_policy"
    )]
    async fn remove(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "policyName")] name: Path<String>,
        version: Path<String>,
        body: Idempotent<JsonBody<Removal>>,
    ) -> Result<RemovePolicyResponse, ChangePolicyErrors> {
        let policy = services
            .admin_remove_policy(&auth.0, &name, &version, &body.write)
            .await?;
        Ok(RemovePolicyResponse::Ok(Json(RemovedPolicyEnvelope {
            policy: policy.into(),
        })))
    }

    /// Roll a policy kind back
    ///
    /// Requires `admin:write` and an operator. The kind returns to the policy active before
    /// its last activation (the built-in default after the first); 409 when the default is
    /// active already. Audited as `policy.rolled_back`, naming the version rolled back.
    #[oai(
        path = "/policies/rollback",
        method = "post",
        operation_id = "rollBackPolicy",
        transform = "roll_back_policy"
    )]
    async fn roll_back(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        body: Idempotent<JsonBody<Rollback>>,
    ) -> Result<RollBackPolicyResponse, ChangePolicyErrors> {
        let Rollback(kind) = body.input.value;
        let now = services
            .admin_roll_back_policy(&auth.0, kind, &body.write)
            .await?;
        Ok(RollBackPolicyResponse::Ok(Json(RolledBackEnvelope {
            kind: kind.as_str().to_owned(),
            active: now.map(Into::into),
        })))
    }

    /// Set the shadow authorizer
    ///
    /// Requires `admin:write` and an operator. The authorizer version named is evaluated
    /// beside the active one on live traffic, every disagreement recorded, no decision
    /// changed; a body without `policy` stops it. A version that does not exist is a 404.
    /// Audited as `policy.shadow_set`.
    #[oai(
        path = "/policies/shadow",
        method = "put",
        operation_id = "setShadowPolicy",
        transform = "set_shadow_policy"
    )]
    async fn set_shadow(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        body: Idempotent<JsonBody<Shadow>>,
    ) -> Result<SetShadowPolicyResponse, ChangePolicyErrors> {
        let Shadow(reference) = &body.input.value;
        let version = reference.as_ref().map(|r| (r.name(), r.version()));
        let shadow = services
            .admin_set_shadow_policy(&auth.0, version, &body.write)
            .await?;
        Ok(SetShadowPolicyResponse::Ok(Json(ShadowEnvelope {
            shadow: shadow.map(Into::into),
        })))
    }

    /// List the shadow authorizer's disagreements
    ///
    /// Requires `admin:read` and an operator. Newest first, at most `limit` per page.
    #[oai(
        path = "/policies/shadow/disagreements",
        method = "get",
        operation_id = "listShadowDisagreements",
        transform = "list_shadow_disagreements"
    )]
    async fn disagreements(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListDisagreementsResponse, ReadPoliciesErrors> {
        let page = services
            .admin_list_shadow_disagreements(
                &auth.0,
                page_of(limit.0).map_err(ApiFailure::from)?,
                cursor.0.as_deref(),
            )
            .await?;
        Ok(ListDisagreementsResponse::Ok(Json(DisagreementPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }

    /// List logged policy decisions
    ///
    /// Requires `admin:read` and an operator. The deployment's decision log, newest first:
    /// every deny and failure, a sample of the allows; each filter narrows it.
    #[oai(
        path = "/policies/decisions",
        method = "get",
        operation_id = "listPolicyDecisions",
        transform = "list_policy_decisions"
    )]
    #[allow(clippy::too_many_arguments, reason = "the listing's filters")]
    async fn decisions(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        /// Decisions at or after this time (RFC 3339).
        since: Query<Option<String>>,
        /// Only this operation id (or `review`, `report` for the moderator).
        operation: Query<Option<String>>,
        /// Only this outcome: allow, deny, publish, hold, reject, hide or failure.
        outcome: Query<Option<String>>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListDecisionsResponse, ReadPoliciesErrors> {
        let outcome = match outcome.0.as_deref() {
            None => None,
            Some(raw) => Some(
                DecisionOutcome::parse(raw)
                    .map_err(|reason| ApiFailure::from(field_error("outcome", reason)))?,
            ),
        };
        let since = match since.0.as_deref() {
            None => None,
            Some(raw) => Some(
                chrono::DateTime::parse_from_rfc3339(raw)
                    .map_err(|_| {
                        ApiFailure::from(field_error("since", "must be an RFC 3339 time"))
                    })?
                    .with_timezone(&chrono::Utc),
            ),
        };
        let listing = DecisionListing {
            since,
            operation: operation.0,
            outcome,
            limit: AdminPage::MAX_LIMIT,
        };
        let page = services
            .admin_list_policy_decisions(
                &auth.0,
                &listing,
                page_of(limit.0).map_err(ApiFailure::from)?,
                cursor.0.as_deref(),
            )
            .await?;
        Ok(ListDecisionsResponse::Ok(Json(DecisionPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }

    /// List the webhook signing keys
    ///
    /// Requires `admin:read` and an operator. The public keys webhooks to runners are signed
    /// with, current first, as /.well-known/jwks.json publishes them; never a private key.
    #[oai(
        path = "/webhook-signing-keys",
        method = "get",
        operation_id = "listWebhookSigningKeys",
        transform = "list_webhook_signing_keys"
    )]
    async fn webhook_keys(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListWebhookKeysResponse, ReadPoliciesErrors> {
        let page = services
            .admin_list_webhook_signing_keys(
                &auth.0,
                page_of(limit.0).map_err(ApiFailure::from)?,
                cursor.0.as_deref(),
            )
            .await?;
        Ok(ListWebhookKeysResponse::Ok(Json(WebhookKeyPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }
}
