//! The [`Idempotent`] extractor: an operation's input, claimed under its key.
//!
//! A stored response (a child token's secret, say) is given only to a caller that may still
//! perform the operation. The key's record belongs to one token, and that token is
//! authenticated on every request; before a replay, the operation's authorization is asked
//! again through the service ([`Services::may_replay`]: the active policy, and an issuer's
//! current limits), from the input's [`Permitted`] description of the request. Refused, the
//! caller gets what a fresh request would get (a 403 or 404) and the record stays. A runner's
//! signed report needs nothing more: its signature was verified against its live keys first.
//! The same question is asked when the outcome is found only after the handler ran (an earlier
//! attempt's commit landed late): a claimed request keeps it as its [`ReplayGate`].
//!
//! Nothing of the record's place or fingerprint is written by a handler: the operation id is
//! the declaration's of the route that admitted the request (`http/admission.rs`); method and
//! path are the request's as sent; the principal is the input's authenticated caller; the
//! digest is the body's.
//!
//! [`Services::may_replay`]: crate::service::Services::may_replay

use std::sync::Arc;

use futures_util::FutureExt;
use poem::{Request, RequestBody, Response};
use poem_openapi::registry::{MetaParamIn, MetaRequest, MetaSchemaRef, Registry};
use poem_openapi::{ApiExtractor, ApiExtractorType, ExtractParamOptions};

use super::guard::Claimed;
use super::record::IdempotentRequest;
use super::{Stage, Ticket};
use crate::domain::{Actor, CorrelationId, Operation, Principal};
use crate::http::auth::{AuthOutcome, token_subject};
use crate::http::error::ApiFailure;
use crate::http::payload::JsonBody;
use crate::service::{Permission, ReplayCheck, Services};
use crate::storage::WriteContext;

/// What a keyed request does next: run with a write context whose transaction waits for the
/// outcome, or answer with the saved response.
enum NextAction {
    StartProcessing(WriteContext),
    ReturnSavedResponse(Response),
}

impl Ticket {
    #[allow(
        clippy::too_many_arguments,
        reason = "what the claim and its write context need"
    )]
    async fn claim(
        &self,
        req: &Request,
        principal: Option<String>,
        quota_owner: Option<String>,
        body_digest: [u8; 32],
        permission: Option<Permission<'_>>,
        correlation_id: CorrelationId,
        actor: Actor,
    ) -> Result<NextAction, poem::Error> {
        // Only a declared idempotent operation reads its input through here.
        let operation = req
            .data::<Operation>()
            .filter(|op| op.spec().idempotent)
            .map(|op| op.id());
        let (Some(operation), Some(principal)) = (operation, principal) else {
            tracing::error!("an idempotent request has no known operation or no principal");
            return Err(ApiFailure::internal().into());
        };
        let request = IdempotentRequest {
            principal,
            operation,
            method: req.method().as_str(),
            path: req.uri().path(),
            body_digest,
            quota_owner,
        };
        let gate = permission
            .map(|permission| ReplayGate::new(req, &permission))
            .transpose()?;
        match self.guard.claim(&self.key, request).await? {
            Claimed::Run(held) => {
                self.guard.check_quota(&held).await?;
                *self.stage() = Stage::Claimed(held, gate.map(Box::new));
                let write = WriteContext::held(correlation_id, actor, self.slot.clone());
                Ok(NextAction::StartProcessing(write))
            }
            Claimed::Replay(response) => {
                if let Some(gate) = gate {
                    gate.allows().await?;
                }
                *self.stage() = Stage::Replayed;
                Ok(NextAction::ReturnSavedResponse(response))
            }
        }
    }
}

/// What a bearer-authenticated keyed request must still be permitted before any stored
/// outcome is answered to it, owned so that it outlives the handler.
pub(crate) struct ReplayGate {
    services: Arc<Services>,
    principal: Principal,
    check: ReplayCheck,
}

impl ReplayGate {
    fn new(req: &Request, permission: &Permission<'_>) -> Result<Self, poem::Error> {
        let services = req.data::<Arc<Services>>();
        let principal = match req.data::<AuthOutcome>() {
            Some(AuthOutcome::Authenticated(principal)) => Some(principal),
            _ => None,
        };
        let (Some(services), Some(principal)) = (services, principal) else {
            tracing::error!("a keyed request has no services or no authenticated caller");
            return Err(ApiFailure::internal().into());
        };
        Ok(Self {
            services: services.clone(),
            principal: principal.clone(),
            check: permission.replay_check(),
        })
    }

    /// Asks the service whether the caller may still perform the request; refused, the
    /// answer a fresh request would get.
    pub(super) async fn allows(&self) -> Result<(), poem::Error> {
        self.services
            .may_replay(&self.principal, &self.check)
            .await
            .map_err(|e| {
                tracing::info!("idempotent replay refused: the caller may no longer perform it");
                ApiFailure::from(e).into()
            })
    }
}

/// What a bearer-authenticated operation's parsed body asks to do, with the ids of its path
/// (`path_id`): asked again before a keyed repeat is answered.
pub trait Permitted {
    fn permission<'a>(&'a self, req: &'a Request) -> Permission<'a>;
}

/// The path variable `name` of the admitted operation's route, as the route matched it (the
/// value `Path<String>` reads); empty when the route has none of that name. poem-openapi
/// registers a route's variables by position (`:param0`, `:param1`, as the route table's test
/// shows), so the declaration says which position the name has.
pub fn path_id<'a>(req: &'a Request, name: &str) -> &'a str {
    req.data::<Operation>()
        .and_then(|op| op.spec().variable_index(name))
        .and_then(|index| req.raw_path_param(&format!("param{index}")))
        .unwrap_or_default()
}

/// The question of an admin-plane change: `operation` and its route's ids, the organisation
/// first (`Operation::variables`).
pub fn admin_permission(operation: Operation, req: &Request) -> Permission<'_> {
    let mut names = operation.variables();
    let organisation = names.next().map_or("", |name| path_id(req, name));
    let target = names.next().map(|name| path_id(req, name));
    Permission::Admin {
        operation,
        organisation,
        target,
    }
}

/// What an idempotent operation's input tells of its request.
pub trait IdempotentInput {
    /// The authenticated caller, whose record it is: `tok:<token id>` or `runner:<id>`.
    fn principal(&self, req: &Request) -> Option<String>;
    /// Whose stored-bytes quota the record counts against: `user:<id>` or `runner:<id>`.
    fn quota_owner(&self, req: &Request) -> Option<String>;
    /// SHA-256 of the canonical body.
    fn body_digest(&self) -> [u8; 32];
    /// What must still be permitted for a replay to be answered; `None`: nothing beyond the
    /// authentication that already ran.
    fn permission<'a>(&'a self, req: &'a Request) -> Option<Permission<'a>>;
    /// Who the request's writes are recorded as.
    fn actor(&self, req: &Request) -> Option<Actor>;
}

/// A bearer-authenticated body: the route's security scheme has already accepted the token.
impl<T: Permitted> IdempotentInput for JsonBody<T> {
    fn principal(&self, req: &Request) -> Option<String> {
        match req.data::<AuthOutcome>()? {
            AuthOutcome::Authenticated(principal) => Some(token_subject(principal)),
            AuthOutcome::Failed(_) => None,
        }
    }

    fn quota_owner(&self, req: &Request) -> Option<String> {
        match req.data::<AuthOutcome>()? {
            AuthOutcome::Authenticated(principal) => Some(format!("user:{}", principal.user_id)),
            AuthOutcome::Failed(_) => None,
        }
    }

    fn body_digest(&self) -> [u8; 32] {
        self.digest
    }

    fn permission<'a>(&'a self, req: &'a Request) -> Option<Permission<'a>> {
        Some(self.value.permission(req))
    }

    fn actor(&self, req: &Request) -> Option<Actor> {
        match req.data::<AuthOutcome>()? {
            AuthOutcome::Authenticated(principal) => {
                Some(Actor::user(principal.user_id, principal.token_id))
            }
            AuthOutcome::Failed(_) => None,
        }
    }
}

/// An operation's input, extracted as `B` and then claimed under the request's
/// `Idempotency-Key` (if it has one), with the [`WriteContext`] every write of the handler
/// takes: held for the outcome when the key was claimed, immediate without a key. Documented
/// exactly as `B`.
pub struct Idempotent<B> {
    pub input: B,
    pub write: WriteContext,
}

impl<'a, B> ApiExtractor<'a> for Idempotent<B>
where
    B: ApiExtractor<'a> + IdempotentInput + Send,
{
    const TYPES: &'static [ApiExtractorType] = B::TYPES;
    const PARAM_IS_REQUIRED: bool = B::PARAM_IS_REQUIRED;
    type ParamType = B::ParamType;
    type ParamRawType = B::ParamRawType;

    fn register(registry: &mut Registry) {
        B::register(registry);
    }

    fn security_schemes() -> Vec<&'static str> {
        B::security_schemes()
    }

    fn has_security_fallback() -> bool {
        B::has_security_fallback()
    }

    fn param_in() -> Option<MetaParamIn> {
        B::param_in()
    }

    fn param_schema_ref() -> Option<MetaSchemaRef> {
        B::param_schema_ref()
    }

    fn request_meta() -> Option<MetaRequest> {
        B::request_meta()
    }

    fn param_raw_type(&self) -> Option<&Self::ParamRawType> {
        self.input.param_raw_type()
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        param_opts: ExtractParamOptions<Self::ParamType>,
    ) -> poem::Result<Self> {
        // Boxed, as poem-openapi does for its own extractors (rust-lang/rust#100013).
        let input = B::from_request(request, body, param_opts).boxed().await?;
        let correlation_id = request
            .data::<CorrelationId>()
            .cloned()
            .unwrap_or_else(CorrelationId::generate);
        // The route's authentication ran first; a caller it did not accept gets its 401.
        let Some(actor) = input.actor(request) else {
            return Err(ApiFailure::from(crate::service::ServiceError::Unauthenticated).into());
        };
        let Some(ticket) = request.data::<Arc<Ticket>>() else {
            let write = WriteContext::immediate(correlation_id, actor);
            return Ok(Self { input, write });
        };
        let (principal, digest) = (input.principal(request), input.body_digest());
        let quota_owner = input.quota_owner(request);
        let permission = input.permission(request);
        let next = ticket
            .claim(
                request,
                principal,
                quota_owner,
                digest,
                permission,
                correlation_id,
                actor,
            )
            .await?;
        match next {
            NextAction::StartProcessing(write) => Ok(Self { input, write }),
            // An extractor can only answer through `Err`: the saved response itself is carried,
            // and poem sends it as it is; the handler never runs.
            NextAction::ReturnSavedResponse(replay) => Err(poem::Error::from_response(replay)),
        }
    }
}
