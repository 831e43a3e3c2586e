//! Outermost middleware: correlation id, body-size guard, error mapping, access log, metrics.

use std::sync::Arc;
use std::time::Instant;

use poem::http::{HeaderValue, StatusCode, header};
use poem::{Endpoint, IntoResponse, Request, Response};
use poem_openapi::OperationId;
use tracing::Instrument;

use super::error::ApiFailure;
use super::metrics::HttpMetrics;
use crate::domain::{CorrelationId, FieldError, ValidationErrors};

pub const CORRELATION_HEADER: &str = "x-correlation-id";

/// The configured request body limit, readable by payload extractors.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

pub struct RequestContext<E> {
    inner: E,
    metrics: Arc<HttpMetrics>,
    body_limit: usize,
}

impl<E> RequestContext<E> {
    pub fn new(inner: E, metrics: Arc<HttpMetrics>, body_limit: usize) -> Self {
        Self {
            inner,
            metrics,
            body_limit,
        }
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

impl<E: Endpoint> Endpoint for RequestContext<E> {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        let started = Instant::now();
        let (cid, refused) = correlation_id(&req);
        let method = req.method().as_str().to_owned();
        let span = tracing::info_span!("request", correlation_id = %cid, method = %method, path = %req.uri().path());
        req.set_data(cid.clone());
        req.set_data(BodyLimit(self.body_limit));

        let outcome = async {
            if let Some(reason) = refused {
                let errors = ValidationErrors::from(FieldError::new(CORRELATION_HEADER, reason));
                return Err(ApiFailure::validation(&errors).into());
            }
            if req.headers().get_all(header::AUTHORIZATION).iter().count() > 1 {
                return Err(ApiFailure::from(crate::service::ServiceError::Unauthenticated).into());
            }
            if declared_length(&req).is_some_and(|n| n > self.body_limit) {
                return Err(ApiFailure::payload_too_large(self.body_limit).into());
            }
            self.inner.call(req).await.map(IntoResponse::into_response)
        }
        .instrument(span.clone())
        .await;

        let (mut response, operation) = match outcome {
            Ok(response)
                if response.status().is_client_error() || response.status().is_server_error() =>
            {
                // A framework response that bypassed the error path: give it an ApiError body.
                let operation = response.data::<OperationId>().map(|o| o.0);
                (
                    ApiFailure::from_status(response.status()).render(&cid),
                    operation,
                )
            }
            Ok(response) => {
                let operation = response.data::<OperationId>().map(|o| o.0);
                (response, operation)
            }
            Err(err) => {
                let operation = err.data::<OperationId>().map(|o| o.0);
                let failure = ApiFailure::from_poem(err);
                (failure.render(&cid), operation)
            }
        };
        if let Ok(value) = HeaderValue::from_str(cid.as_str()) {
            response.headers_mut().insert(CORRELATION_HEADER, value);
        }

        let status = response.status();
        let elapsed = started.elapsed();
        let operation = operation.unwrap_or(if status == StatusCode::NOT_FOUND {
            "unmatched"
        } else {
            "other"
        });
        self.metrics
            .observe(operation, &method, status.as_u16(), elapsed.as_secs_f64());
        span.in_scope(|| {
            let latency_ms = elapsed.as_secs_f64() * 1000.0;
            if status.is_server_error() {
                tracing::warn!(
                    status = status.as_u16(),
                    operation,
                    latency_ms,
                    "request failed"
                );
            } else {
                tracing::info!(
                    status = status.as_u16(),
                    operation,
                    latency_ms,
                    "request completed"
                );
            }
        });
        Ok(response)
    }
}
