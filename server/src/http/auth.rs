//! Authentication: the host's job, before any authorization question is asked.
//!
//! A bearer token is authenticated once by admission, the first step of its operation's route
//! (`admission.rs`; the rate limit needs the principal); [`BearerAuth`] hands its outcome to the handler and documents the
//! scheme. A runner signs its request, body included, so it is known only once the body is
//! read: [`Signed`] reads the body, verifies the signature and charges the runner's rate limit.

use std::sync::Arc;

use futures_util::FutureExt;
use poem::{Request, RequestBody};
use poem_openapi::auth::Bearer;
use poem_openapi::registry::{MetaRequest, Registry};
use poem_openapi::{ApiExtractor, ApiExtractorType, ExtractParamOptions, SecurityScheme};

use super::error::ApiFailure;
use super::idempotency::IdempotentInput;
use super::limits::{Caller, RateGuard};
use super::payload::{FromJson, JsonBody};
use crate::domain::{Operation, Principal, RunnerSignature};
use crate::service::{RunnerPrincipal, ServiceError, Services, SignedRequest};

/// What the middleware learnt from the `Authorization` header.
#[derive(Debug, Clone)]
pub enum AuthOutcome {
    Authenticated(Principal),
    Failed(ServiceError),
}

/// Who a bearer caller is to the idempotency records.
pub fn token_subject(principal: &Principal) -> String {
    format!("tok:{}", principal.token_id)
}

/// Who a signing runner is to the idempotency records.
pub fn runner_subject(runner: &RunnerPrincipal) -> String {
    format!("runner:{}", runner.runner_id)
}

/// A personal access token: `Authorization: Bearer cpat_...`.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", bearer_format = "cpat", checker = "authenticate")]
pub struct BearerAuth(pub Principal);

async fn authenticate(req: &Request, bearer: Bearer) -> poem::Result<Principal> {
    match req.data::<AuthOutcome>() {
        Some(AuthOutcome::Authenticated(principal)) => Ok(principal.clone()),
        Some(AuthOutcome::Failed(e)) => Err(ApiFailure::from(e.clone()).into()),
        None => {
            let services = req
                .data::<Arc<Services>>()
                .ok_or_else(ApiFailure::internal)?;
            services
                .authenticate(&bearer.token)
                .await
                .map_err(|e| ApiFailure::from(e).into())
        }
    }
}

/// A JSON body signed by a runner (the `x-sandbox-*` headers), and the runner it proved to be.
/// In order: the body is parsed, the signature verified over it (401 `invalid_signature`),
/// then the request charged to the runner's rate limit. Documented as the body alone; the
/// headers are added to the document by `docs`.
pub struct Signed<T> {
    pub runner: RunnerPrincipal,
    pub body: JsonBody<T>,
}

/// One header's value, when given exactly once and ASCII.
fn single_header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    let mut values = req.headers().get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

impl<'a, T: FromJson + Send> ApiExtractor<'a> for Signed<T> {
    const TYPES: &'static [ApiExtractorType] = <JsonBody<T> as ApiExtractor<'a>>::TYPES;
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        <JsonBody<T> as ApiExtractor<'a>>::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        <JsonBody<T> as ApiExtractor<'a>>::request_meta()
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        param_opts: ExtractParamOptions<Self::ParamType>,
    ) -> poem::Result<Self> {
        // Boxed, as poem-openapi does for its own extractors (rust-lang/rust#100013).
        let body = <JsonBody<T> as ApiExtractor<'a>>::from_request(request, body, param_opts)
            .boxed()
            .await?;
        let signature = RunnerSignature::parse(|name| single_header(request, name))
            .map_err(|reason| ApiFailure::from(ServiceError::signature(reason)))?;
        let services = request
            .data::<Arc<Services>>()
            .ok_or_else(ApiFailure::internal)?;
        let runner = services
            .authenticate_runner(&SignedRequest {
                signature,
                method: request.method().as_str(),
                path: request.uri().path(),
                body_sha256: body.raw_digest,
            })
            .await
            .map_err(ApiFailure::from)?;
        let rates = request
            .data::<Arc<RateGuard>>()
            .ok_or_else(ApiFailure::internal)?;
        // The class of the operation whose route admitted it; a signed body serves no other.
        let class = request
            .data::<Operation>()
            .ok_or_else(ApiFailure::internal)?
            .spec()
            .rate;
        rates
            .charge_in_route(request, Caller::Runner(runner.runner_id), class)
            .await?;
        Ok(Self { runner, body })
    }
}

impl<T> IdempotentInput for Signed<T> {
    fn principal(&self, _req: &Request) -> Option<String> {
        Some(runner_subject(&self.runner))
    }

    fn quota_owner(&self, _req: &Request) -> Option<String> {
        Some(runner_subject(&self.runner))
    }

    fn body_digest(&self) -> [u8; 32] {
        self.body.digest
    }

    /// The signature, verified against the runner's live keys, is the whole of it.
    fn permission<'a>(&'a self, _req: &'a Request) -> Option<crate::service::Permission<'a>> {
        None
    }

    fn actor(&self, _req: &Request) -> Option<crate::domain::Actor> {
        Some(crate::domain::Actor::runner(self.runner.runner_id))
    }
}
