//! Outermost middleware, in the order of docs/design.md ("Request pipeline"): correlation id,
//! client address and body-size guard, then the route, whose first step is admission
//! (authentication and rate limit, `admission.rs`); every failure on the way is rendered as an
//! ApiError, and every response gets its headers.

use std::sync::Arc;
use std::time::Instant;

use poem::http::{HeaderValue, StatusCode, header};
use poem::{Endpoint, IntoResponse, Request, Response};
use poem_openapi::OperationId;
use tracing::Instrument;

use super::admission::Admission;
use super::error::{ApiFailure, retry_after_value};
use super::forwarded::{FORWARDED_FOR, TrustedProxies};
use super::idempotency::IdempotencyHeader;
use super::limits::{RateGuard, RouteDecision, tightest};
use super::metrics::HttpMetrics;
use super::ops::AllowedMethods;
use crate::domain::{CorrelationId, FieldError, IdempotencyKey, ValidationErrors};
use crate::service::ServiceError;
use crate::storage::RateDecision;

pub const CORRELATION_HEADER: &str = "x-correlation-id";
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// The configured request body limit, readable by payload extractors.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

pub struct RequestContext<E> {
    inner: E,
    metrics: Arc<HttpMetrics>,
    rates: Arc<RateGuard>,
    body_limit: usize,
    /// The policy install's own limit (its body is a component, not a JSON document).
    upload_limit: Option<usize>,
    allowed: Option<Arc<AllowedMethods>>,
    trusted_proxies: Arc<TrustedProxies>,
}

impl<E> RequestContext<E> {
    pub fn new(
        inner: E,
        metrics: Arc<HttpMetrics>,
        rates: Arc<RateGuard>,
        body_limit: usize,
        trusted_proxies: Arc<TrustedProxies>,
    ) -> Self {
        Self {
            inner,
            metrics,
            rates,
            body_limit,
            upload_limit: None,
            allowed: None,
            trusted_proxies,
        }
    }

    /// The body limit of `POST /v1/policies`, which takes a component of up to this many bytes.
    pub fn with_upload_limit(mut self, limit: usize) -> Self {
        self.upload_limit = Some(limit);
        self
    }

    /// The body limit of a request: the policy install's own, or every other route's.
    fn body_limit_of(&self, method: &poem::http::Method, path: &str) -> usize {
        let install = crate::domain::Operation::InstallPolicy.spec();
        match self.upload_limit {
            Some(limit) if method.as_str() == install.method && path == install.route => limit,
            _ => self.body_limit,
        }
    }

    /// The methods of each route, for the `Allow` header of a 405.
    pub fn with_allowed(mut self, allowed: Arc<AllowedMethods>) -> Self {
        self.allowed = Some(allowed);
        self
    }
}

/// The request's correlation id, or a fresh one and the reason the given one was refused.
fn correlation_id(req: &Request) -> (CorrelationId, Option<String>) {
    if req.headers().get_all(CORRELATION_HEADER).iter().count() > 1 {
        // Two field lines mean "a, b" (RFC 9110), which the pattern does not allow.
        return (
            CorrelationId::generate(),
            Some("must be given once".to_owned()),
        );
    }
    match req.headers().get(CORRELATION_HEADER) {
        None => (CorrelationId::generate(), None),
        Some(value) => match value
            .to_str()
            .map_err(|_| "must be ASCII".to_owned())
            .and_then(CorrelationId::parse)
        {
            Ok(id) => (id, None),
            Err(reason) => (CorrelationId::generate(), Some(reason)),
        },
    }
}

fn declared_length(req: &Request) -> Option<usize> {
    req.headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

fn field_failure(field: &str, reason: impl Into<String>) -> poem::Error {
    ApiFailure::validation(&ValidationErrors::from(FieldError::new(field, reason))).into()
}

/// The `Idempotency-Key` of a mutating request, parsed; other methods ignore the header.
fn idempotency_key(req: &Request) -> Result<IdempotencyHeader, poem::Error> {
    let mutating = super::idempotency::is_mutating(req.method());
    let values = req.headers().get_all(IDEMPOTENCY_HEADER);
    if !mutating {
        return Ok(IdempotencyHeader(None));
    }
    let mut iter = values.iter();
    let Some(value) = iter.next() else {
        return Ok(IdempotencyHeader(None));
    };
    if iter.next().is_some() {
        return Err(field_failure("Idempotency-Key", "must be given once"));
    }
    let raw = value
        .to_str()
        .map_err(|_| field_failure("Idempotency-Key", "must be ASCII"))?;
    IdempotencyKey::parse(raw)
        .map(|k| IdempotencyHeader(Some(k)))
        .map_err(|r| field_failure("Idempotency-Key", r))
}

/// The request's client address, as [`RequestContext`] found it (`forwarded.rs`).
#[derive(Clone)]
struct ClientAddress(String);

pub(super) fn client_address(req: &Request) -> &str {
    req.data::<ClientAddress>().map_or("unknown", |a| &a.0)
}

impl<E> RequestContext<E> {
    fn find_client(&self, req: &Request) -> ClientAddress {
        let Some(peer) = req.remote_addr().as_socket_addr().map(|a| a.ip()) else {
            return ClientAddress("unknown".into());
        };
        if self.trusted_proxies.is_empty() {
            return ClientAddress(peer.to_string());
        }
        // A field line that is not text is no address: the walk stops at its writer.
        let lines = req
            .headers()
            .get_all(FORWARDED_FOR)
            .iter()
            .map(|v| v.to_str().unwrap_or(""));
        ClientAddress(self.trusted_proxies.client(peer, lines).to_string())
    }
}

fn set_rate_headers(response: &mut Response, decision: &RateDecision) {
    let headers = response.headers_mut();
    headers.insert("x-ratelimit-limit", HeaderValue::from(decision.limit));
    headers.insert(
        "x-ratelimit-remaining",
        HeaderValue::from(decision.remaining),
    );
    if !decision.allowed {
        headers.insert(header::RETRY_AFTER, retry_after_value(decision.retry_after));
    }
}

impl<E: Endpoint> Endpoint for RequestContext<E> {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        let started = Instant::now();
        let (cid, refused) = correlation_id(&req);
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let span =
            tracing::info_span!("request", correlation_id = %cid, method = %method, path = %path);
        req.set_data(cid.clone());
        let body_limit = self.body_limit_of(&method, &path);
        req.set_data(BodyLimit(body_limit));
        let client = self.find_client(&req);
        let address = client.0.clone();
        req.set_data(client);

        let route_decision = RouteDecision::default();
        let mut routed = false;
        let outcome = async {
            if let Some(reason) = refused {
                return Err(field_failure(CORRELATION_HEADER, reason));
            }
            if req.headers().get_all(header::AUTHORIZATION).iter().count() > 1 {
                return Err(ApiFailure::from(ServiceError::Unauthenticated).into());
            }
            if declared_length(&req).is_some_and(|n| n > body_limit) {
                return Err(ApiFailure::payload_too_large(body_limit).into());
            }
            let key = idempotency_key(&req)?;
            req.set_data(key);
            req.set_data(route_decision.clone());
            routed = true;
            self.inner.call(req).await.map(IntoResponse::into_response)
        }
        .instrument(span.clone())
        .await;
        let mut decision = route_decision.admission();
        let outcome = if routed && path.starts_with("/v1/") && !route_decision.was_admitted() {
            // No operation took it (a 404, a 405): its method's budget, once the router said so.
            let charge = Admission::charge_unrouted(&self.rates, method.as_str(), &path, &address);
            match charge.instrument(span.clone()).await {
                Ok(charged) => {
                    decision = charged;
                    outcome
                }
                Err(refused) => Err(refused.into()),
            }
        } else {
            outcome
        };

        let mut code: Option<&'static str> = None;
        let (mut response, operation) = match outcome {
            Ok(response)
                if (response.status().is_client_error() || response.status().is_server_error())
                    && !is_json(&response)
                    && !is_page(&response) =>
            {
                // A framework response that bypassed the error path: give it an ApiError body.
                let operation = response.data::<OperationId>().map(|o| o.0);
                let failure = ApiFailure::from_status(response.status());
                code = Some(failure.code);
                (failure.render(&cid), operation)
            }
            Ok(response) => {
                let operation = response.data::<OperationId>().map(|o| o.0);
                // A route that limits by a principal it authenticated itself (runners).
                if let Some(own) = route_decision.get() {
                    decision = Some(decision.map_or(own, |d| tightest(d, own)));
                }
                (response, operation)
            }
            Err(err) => {
                let operation = err.data::<OperationId>().map(|o| o.0);
                let failure = ApiFailure::from_poem(err);
                if let Some(own) = failure.rate {
                    decision = Some(own);
                }
                code = Some(failure.code);
                (failure.render(&cid), operation)
            }
        };
        if let Ok(value) = HeaderValue::from_str(cid.as_str()) {
            response.headers_mut().insert(CORRELATION_HEADER, value);
        }
        if let Some(decision) = &decision {
            set_rate_headers(&mut response, decision);
        }
        if response.status() == StatusCode::METHOD_NOT_ALLOWED
            && let Some(allow) = self.allowed.as_ref().and_then(|a| a.allow(&path))
            && let Ok(value) = HeaderValue::from_str(allow)
        {
            response.headers_mut().insert(header::ALLOW, value);
        }

        let status = response.status();
        let elapsed = started.elapsed();
        // Refused before routing (a 429, a 401, a 413): named by its route all the same.
        let operation = operation.or_else(|| {
            self.allowed
                .as_ref()
                .and_then(|a| a.operation(&method, &path))
        });
        let operation = operation.unwrap_or(if status == StatusCode::NOT_FOUND {
            "unmatched"
        } else {
            "other"
        });
        self.metrics
            .observe(operation, &method, status.as_u16(), elapsed.as_secs_f64());
        span.in_scope(|| {
            let latency_ms = elapsed.as_secs_f64() * 1000.0;
            let status = status.as_u16();
            match code {
                Some(code) if status >= 500 => {
                    tracing::warn!(status, code, operation, latency_ms, "request failed")
                }
                Some(code) => {
                    tracing::info!(status, code, operation, latency_ms, "request completed")
                }
                None => tracing::info!(status, operation, latency_ms, "request completed"),
            }
        });
        Ok(response)
    }
}

/// A console page, which shows its own error (with the ApiError's message and correlation id).
fn is_page(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"))
}

fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}
