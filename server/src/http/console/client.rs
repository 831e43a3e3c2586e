//! The console's client of the API: each page sends its operation to the API endpoint in
//! this process, with the session's token as bearer and the page request's address and
//! correlation id, so the operation meets the same admission, rate limits, authorizer,
//! idempotency and audit as one from cpctl, and both log lines share one correlation id.

use std::sync::Arc;

use poem::endpoint::BoxEndpoint;
use poem::http::{Method, StatusCode, header};
use poem::{Body, Endpoint, Request, RequestParts, Response};
use serde_json::Value;

use super::super::context::CORRELATION_HEADER;
use crate::domain::CorrelationId;

pub struct ApiClient {
    api: Arc<BoxEndpoint<'static>>,
}

/// An API answer: its status, its JSON body (`Null` when it had none) and correlation id.
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub correlation_id: String,
}

/// An ApiError, as a page shows it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub status: StatusCode,
    pub code: String,
    pub message: String,
    pub correlation_id: String,
}

impl Reply {
    /// The body of a 2xx, or the ApiError of anything else.
    pub fn into_result(self) -> Result<Value, Failure> {
        if self.status.is_success() {
            return Ok(self.body);
        }
        let error = &self.body["error"];
        let text = |v: &Value, default: &str| v.as_str().unwrap_or(default).to_owned();
        Err(Failure {
            status: self.status,
            code: text(&error["code"], "internal"),
            message: text(&error["message"], "the request failed"),
            correlation_id: text(&error["correlationId"], &self.correlation_id),
        })
    }
}

/// One operation to send.
pub struct Call<'a> {
    pub method: Method,
    /// Path and query, `/v1/...`.
    pub path: String,
    pub body: Option<Value>,
    /// The form's `Idempotency-Key`, so a form sent twice changes things once.
    pub key: Option<&'a str>,
}

impl<'a> Call<'a> {
    pub fn get(path: String) -> Self {
        Self {
            method: Method::GET,
            path,
            body: None,
            key: None,
        }
    }

    pub fn send(method: Method, path: String, body: Value, key: &'a str) -> Self {
        Self {
            method,
            path,
            body: Some(body),
            key: Some(key),
        }
    }
}

impl ApiClient {
    pub fn new(api: Arc<BoxEndpoint<'static>>) -> Self {
        Self { api }
    }

    /// The API's raw response (the audit stream passes through as it is).
    pub async fn respond(&self, from: &Request, bearer: &str, call: Call<'_>) -> Response {
        let mut builder = poem::http::Request::builder()
            .method(call.method)
            .uri(call.path)
            .header(header::AUTHORIZATION, format!("Bearer {bearer}"))
            .header(header::ACCEPT, "application/json, text/event-stream");
        if let Some(cid) = from.data::<CorrelationId>() {
            builder = builder.header(CORRELATION_HEADER, cid.as_str());
        }
        // The client's address as the page request had it, so limits charge the same client.
        for name in ["x-forwarded-for", "user-agent", "last-event-id"] {
            for value in from.headers().get_all(name) {
                builder = builder.header(name, value);
            }
        }
        if let Some(key) = call.key {
            builder = builder.header("idempotency-key", key);
        }
        let body = match call.body {
            Some(json) => {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
                Body::from_vec(serde_json::to_vec(&json).unwrap_or_default())
            }
            None => Body::empty(),
        };
        let Ok(request) = builder.body(()) else {
            return Response::builder().status(StatusCode::BAD_REQUEST).finish();
        };
        let (parts, ()) = request.into_parts();
        let parts = RequestParts::from((
            parts,
            from.local_addr().clone(),
            from.remote_addr().clone(),
            from.scheme().clone(),
        ));
        match self.api.call(Request::from_parts(parts, body)).await {
            Ok(response) => response,
            Err(err) => err.into_response(),
        }
    }

    /// The operation's answer, its body read as JSON.
    pub async fn call(&self, from: &Request, bearer: &str, call: Call<'_>) -> Reply {
        let response = self.respond(from, bearer, call).await;
        let status = response.status();
        let correlation_id = response
            .headers()
            .get(CORRELATION_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response.into_body().into_bytes().await.unwrap_or_default();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            body,
            correlation_id,
        }
    }
}
