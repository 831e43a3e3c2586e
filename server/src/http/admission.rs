//! Admission, the first step inside an operation's route: the caller's bearer token (a
//! runner's signature is its extractor's to verify) and the rate limit of the operation's class,
//! in one limiter round trip, before any extractor reads the body.
//!
//! Each handler's endpoint is wrapped by [`admitted`] with its [`Operation`] (poem-openapi's
//! `#[oai(transform = ...)]`), so the declaration travels with the request from the router on:
//! nothing downstream looks the route up by its path. A request that reaches no operation (a
//! 404, a 405) is charged by its method's class once the router has answered it
//! ([`Admission::charge_unrouted`]), so a flood of unknown paths spends a budget as before.

use std::sync::Arc;

use poem::http::header;
use poem::{Endpoint, IntoResponse, Request, Response};

use super::auth::AuthOutcome;
use super::context::client_address;
use super::error::ApiFailure;
use super::limits::{Caller, RateGuard, RouteDecision};
use crate::domain::operation::is_runner_path;
use crate::domain::{Auth, CorrelationId, Operation, RateClass};
use crate::service::{LastUseRecorder, ServiceError, Services};
use crate::storage::RateDecision;

/// What admission needs, shared by every route (route data).
pub struct Admission {
    pub services: Arc<Services>,
    pub rates: Arc<RateGuard>,
    pub last_use: Option<Arc<LastUseRecorder>>,
}

/// The bearer token, when the request carries exactly one `Authorization: Bearer` header.
fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl Admission {
    /// Authenticates a bearer caller (kept in the request for its extractor, failed or not)
    /// and charges the operation's class; a runner's route charges its address's runner budget,
    /// the signature is checked later. Returns the limiter's decision, for the headers.
    async fn admit(
        &self,
        req: &mut Request,
        operation: Operation,
    ) -> Result<Option<RateDecision>, poem::Error> {
        let spec = operation.spec();
        let class = spec.rate;
        if spec.auth == Auth::RunnerSigned {
            // An `Authorization` header is not looked up, and the address's runner budget, not
            // its bearer one, is spent.
            let address = client_address(req);
            return Ok(self
                .rates
                .check(Caller::RunnerAddress(address), class)
                .await?);
        }
        // The caller carries the request's id to the policy decisions it asks for.
        let cid = req.data::<CorrelationId>().cloned();
        let outcome = match bearer(req) {
            Some(token) => Some(match self.services.authenticate(token).await {
                Ok(principal) => AuthOutcome::Authenticated(match cid {
                    Some(cid) => principal.in_request(cid),
                    None => principal,
                }),
                Err(e @ ServiceError::Unavailable) => return Err(ApiFailure::from(e).into()),
                Err(e) => AuthOutcome::Failed(e),
            }),
            None => None,
        };
        let address = client_address(req);
        if let (Some(AuthOutcome::Authenticated(p)), Some(recorder)) = (&outcome, &self.last_use) {
            // Synchronous and bounded: no store or fast-state round trip on this path.
            let agent = req
                .headers()
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok());
            recorder.observe(p.token_id, address, agent);
        }
        let decision = match &outcome {
            Some(AuthOutcome::Authenticated(p)) => self.rates.check(Caller::Token(p), class),
            _ => self.rates.check(Caller::Address(address), class),
        }
        .await;
        if let Some(outcome) = outcome {
            req.set_data(outcome);
        }
        Ok(decision?)
    }

    /// Charges a `/v1` request that no operation took (the router answered 404 or 405) by its
    /// method's class, to its address (a runner path's runner budget): it named no operation,
    /// so no token is looked up for it.
    pub async fn charge_unrouted(
        rates: &RateGuard,
        method: &str,
        path: &str,
        address: &str,
    ) -> Result<Option<RateDecision>, ApiFailure> {
        let class = RateClass::of_method(method);
        let caller = if is_runner_path(path) {
            Caller::RunnerAddress(address)
        } else {
            Caller::Address(address)
        };
        rates.check(caller, class).await
    }
}

/// An operation's endpoint: admission, then the handler with its extractors.
pub struct Admitted<E> {
    operation: Operation,
    inner: E,
}

/// The `#[oai(transform = ...)]` of each handler: `fn name(ep: impl Endpoint) -> impl Endpoint
/// { admitted(Operation::..., ep) }`.
pub fn admitted<E: Endpoint>(operation: Operation, inner: E) -> Admitted<E> {
    Admitted { operation, inner }
}

impl<E: Endpoint> Endpoint for Admitted<E> {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        let admission = req
            .data::<Arc<Admission>>()
            .cloned()
            .ok_or_else(ApiFailure::internal)?;
        req.set_data(self.operation);
        let admitted = admission.admit(&mut req, self.operation).await;
        // Marked even when refused (a 429, a 503): the operation took the request, so the
        // middleware must not charge it a second time as one no operation took.
        if let Some(slot) = req.data::<RouteDecision>() {
            slot.admitted(admitted.as_ref().ok().copied().flatten());
        }
        admitted?;
        self.inner.call(req).await.map(IntoResponse::into_response)
    }
}
