//! The one place where every failure becomes an ApiError body and a status: service errors,
//! body and parameter errors, and the framework's own (unknown route, wrong method, ...).

use poem::error::ResponseError;
use poem::http::StatusCode;
use poem::{IntoResponse, Response};
use poem_openapi::Object;
use poem_openapi::registry::{MetaMediaType, MetaResponse};
use poem_openapi::types::{ToJSON, Type};
use serde_json::{Value, json};

use crate::domain::{CorrelationId, ValidationErrors};
use crate::service::{STREAM_RETRY_AFTER, ServiceError, StreamScope};

/// The `retry-after` of every 503, in seconds.
pub const RETRY_UNAVAILABLE_SECONDS: u32 = 1;

/// Body of every error response.
#[derive(Debug, Clone, Object)]
#[oai(rename = "ApiError")]
pub struct ApiErrorBody {
    pub error: ApiErrorDetail,
    /// The correlation id of the request; equals the `x-correlation-id` response header.
    #[oai(rename = "correlationId")]
    pub correlation_id: String,
}

#[derive(Debug, Clone, Object)]
pub struct ApiErrorDetail {
    /// Stable snake_case word a client can switch on.
    pub code: String,
    /// Human-readable; may change between versions.
    pub message: String,
    /// Which field failed and why, or other structured context.
    #[oai(skip_serializing_if_is_none)]
    pub details: Option<Value>,
}

/// A failure on its way to the client: status, code, message, details. The correlation id is
/// added when it is rendered, by the request-context middleware.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiFailure {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// A rate-limit decision whose headers the response carries (a 429).
    pub rate: Option<crate::storage::RateDecision>,
    /// `retry-after` of a refusal that is not the limiter's (which [`Self::rate`] carries): the
    /// audit stream caps and the idempotency quota.
    pub retry_after: Option<std::time::Duration>,
}

/// A `retry-after` value: whole seconds, rounded up, never 0 (every refusal's, limiter or not).
pub fn retry_after_value(wait: std::time::Duration) -> poem::http::HeaderValue {
    poem::http::HeaderValue::from(wait.as_millis().div_ceil(1000).max(1) as u64)
}

impl ResponseError for ApiFailure {
    fn status(&self) -> StatusCode {
        self.status
    }
}

impl ApiFailure {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            details: None,
            rate: None,
            retry_after: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// A `retry-after` for a refusal that is not the limiter's.
    pub fn with_retry_after(mut self, wait: std::time::Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    pub fn validation(errors: &ValidationErrors) -> Self {
        let list = serde_json::to_value(errors.errors()).unwrap_or(Value::Null);
        let first = errors.errors().first();
        let mut details = json!({ "errors": list });
        if let (Some(first), Value::Object(map)) = (first, &mut details) {
            // The first error is repeated at the top so simple clients can read one field.
            map.insert("field".into(), Value::String(first.field.clone()));
            map.insert("reason".into(), Value::String(first.reason.clone()));
        }
        Self::new(
            StatusCode::BAD_REQUEST,
            "validation_failed",
            format!("the request is invalid: {errors}"),
        )
        .with_details(details)
    }

    /// A 429 with the decision's headers.
    pub fn rate_limited(decision: crate::storage::RateDecision) -> Self {
        let mut failure = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "rate limit exceeded; retry later",
        )
        .with_details(json!({ "limit": decision.limit }));
        failure.rate = Some(decision);
        failure
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the request body is too large",
        )
        .with_details(json!({ "limitBytes": limit }))
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "an internal error occurred",
        )
    }

    pub fn body(&self, correlation_id: &CorrelationId) -> ApiErrorBody {
        ApiErrorBody {
            error: ApiErrorDetail {
                code: self.code.to_owned(),
                message: self.message.clone(),
                details: self.details.clone(),
            },
            correlation_id: correlation_id.to_string(),
        }
    }

    pub fn render(&self, correlation_id: &CorrelationId) -> Response {
        let body = self.body(correlation_id).to_json().unwrap_or(Value::Null);
        let mut response = poem::web::Json(body)
            .with_status(self.status)
            .into_response();
        // Every 503 is transient (a dependency, or no policy decision slot free in time): it
        // says when to retry even when the refusal named no wait of its own.
        let unavailable = (self.status == StatusCode::SERVICE_UNAVAILABLE)
            .then(|| std::time::Duration::from_secs(RETRY_UNAVAILABLE_SECONDS.into()));
        if let Some(wait) = self.retry_after.or(unavailable) {
            response
                .headers_mut()
                .insert(poem::http::header::RETRY_AFTER, retry_after_value(wait));
        }
        if self.status == StatusCode::UNAUTHORIZED && self.code == "unauthenticated" {
            response.headers_mut().insert(
                poem::http::header::WWW_AUTHENTICATE,
                poem::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }

    /// Maps any error a route can raise. Framework errors are recognised by type, then status.
    pub fn from_poem(err: poem::Error) -> Self {
        if let Some(failure) = err.downcast_ref::<ApiFailure>() {
            return failure.clone();
        }
        if let Some(e) = err.downcast_ref::<poem_openapi::error::ParseParamError>() {
            let mut errors = ValidationErrors::default();
            errors.push(crate::domain::FieldError::new(e.name, e.reason.clone()));
            return Self::validation(&errors);
        }
        if let Some(e) = err.downcast_ref::<poem_openapi::error::ContentTypeError>() {
            return Self::new(
                StatusCode::BAD_REQUEST,
                "unsupported_media_type",
                "the request body must be JSON with Content-Type: application/json",
            )
            .with_details(json!({ "reason": e.to_string() }));
        }
        if err.is::<poem_openapi::error::ParseRequestPayloadError>() {
            return Self::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                "the request body is not valid JSON",
            );
        }
        if err.is::<poem_openapi::error::AuthorizationError>() {
            return ServiceError::Unauthenticated.into();
        }
        Self::from_status(err.status())
    }

    /// A failure for a bare status, as from a framework response that carries no ApiError.
    pub fn from_status(status: StatusCode) -> Self {
        match status {
            StatusCode::NOT_FOUND => Self::new(status, "not_found", "no route matches this path"),
            StatusCode::METHOD_NOT_ALLOWED => Self::new(
                status,
                "method_not_allowed",
                "this path does not accept that method",
            ),
            StatusCode::PAYLOAD_TOO_LARGE => {
                Self::new(status, "payload_too_large", "the request body is too large")
            }
            StatusCode::UNAUTHORIZED => ServiceError::Unauthenticated.into(),
            s if s.is_client_error() => Self::new(
                s,
                "bad_request",
                s.canonical_reason().unwrap_or("bad request"),
            ),
            StatusCode::SERVICE_UNAVAILABLE => ServiceError::Unavailable.into(),
            _ => Self::internal(),
        }
    }
}

impl From<ServiceError> for ApiFailure {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Validation(errors) => Self::validation(&errors),
            ServiceError::Unauthenticated => Self::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "missing, invalid, expired or revoked credentials",
            ),
            ServiceError::SignatureRejected(reason) => Self::new(
                StatusCode::UNAUTHORIZED,
                "invalid_signature",
                format!("the runner signature was refused: {reason}"),
            ),
            ServiceError::Forbidden { reason, details } => Self {
                status: StatusCode::FORBIDDEN,
                code: "forbidden",
                message: reason,
                details,
                rate: None,
                retry_after: None,
            },
            ServiceError::NotFound { message, details } => Self {
                status: StatusCode::NOT_FOUND,
                code: "not_found",
                message,
                details,
                rate: None,
                retry_after: None,
            },
            ServiceError::Conflict {
                code,
                message,
                details,
            } => Self {
                status: StatusCode::CONFLICT,
                code,
                message,
                details,
                rate: None,
                retry_after: None,
            },
            ServiceError::Unprocessable {
                code,
                message,
                details,
            } => Self {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code,
                message,
                details,
                rate: None,
                retry_after: None,
            },
            ServiceError::CursorExpired { oldest } => Self::new(
                StatusCode::GONE,
                "cursor_expired",
                "the events this cursor points at were removed by retention; start again from \
                 the newest page, or resume after details.oldestSequence - 1",
            )
            .with_details(json!({ "oldestSequence": oldest })),
            ServiceError::PolicyError => Self::new(
                StatusCode::FORBIDDEN,
                "policy_error",
                "the authorization policy could not decide; access is denied",
            ),
            ServiceError::Unavailable => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "a dependency is unavailable; retry later",
            ),
            ServiceError::StreamCapReached(cap) => {
                let scope = cap.scope.as_str();
                let failure = match cap.scope {
                    // The caller's own streams: the limiter's code and headers.
                    StreamScope::Token | StreamScope::Workspace | StreamScope::Organisation => {
                        Self::new(
                            StatusCode::TOO_MANY_REQUESTS,
                            "rate_limited",
                            format!("too many open audit streams for this {scope}; retry later"),
                        )
                    }
                    // The server is full, whoever asks.
                    StreamScope::Process => Self::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "unavailable",
                        "this server holds as many audit streams as it may; retry later",
                    ),
                };
                failure
                    .with_details(json!({ "limit": cap.limit, "scope": scope }))
                    .with_retry_after(STREAM_RETRY_AFTER)
            }
            ServiceError::Internal(cause) => {
                tracing::error!(%cause, "internal error");
                Self::internal()
            }
        }
    }
}

impl From<ValidationErrors> for ApiFailure {
    fn from(e: ValidationErrors) -> Self {
        Self::validation(&e)
    }
}

fn describe(status: u16) -> &'static str {
    match status {
        400 => {
            "Invalid request: malformed JSON, wrong content type, unknown field or a constraint violated"
        }
        401 => "Missing, malformed, expired or revoked credentials",
        403 => "The credentials do not permit this operation",
        404 => "A referenced resource does not exist or is not visible",
        409 => "Conflicts with the current state",
        410 => "The cursor or Last-Event-ID points into audit events removed by retention",
        413 => "The request body exceeds the size limit",
        422 => "Understood but refused for what it holds (the error's code says why)",
        429 => "Rate limit exceeded",
        500 => "Internal error",
        503 => "A dependency is unavailable; retry later",
        _ => "Error",
    }
}

/// OpenAPI metadata of one error status (the body is always ApiError).
pub fn error_response_meta(status: u16) -> MetaResponse {
    MetaResponse {
        description: describe(status),
        status: Some(status),
        status_range: None,
        content: vec![MetaMediaType {
            content_type: "application/json; charset=utf-8",
            schema: ApiErrorBody::schema_ref(),
        }],
        headers: vec![],
    }
}

/// Declares an endpoint's error type listing exactly the statuses it can return, so the
/// OpenAPI document is accurate. At run time it carries an [`ApiFailure`] to the middleware.
macro_rules! error_responses {
    ($(#[$meta:meta])* $name:ident: $($status:literal),+ $(,)?) => {
        $(#[$meta])*
        #[derive(Debug)]
        pub struct $name(pub $crate::http::error::ApiFailure);

        impl poem_openapi::ApiResponse for $name {
            fn meta() -> poem_openapi::registry::MetaResponses {
                poem_openapi::registry::MetaResponses {
                    responses: vec![$($crate::http::error::error_response_meta($status)),+],
                }
            }

            fn register(registry: &mut poem_openapi::registry::Registry) {
                <$crate::http::error::ApiErrorBody as poem_openapi::types::Type>::register(registry);
            }
        }

        impl From<$name> for poem::Error {
            fn from(e: $name) -> Self {
                poem::Error::from(e.0)
            }
        }

        impl From<$crate::http::error::ApiFailure> for $name {
            fn from(e: $crate::http::error::ApiFailure) -> Self {
                Self(e)
            }
        }

        impl From<$crate::service::ServiceError> for $name {
            fn from(e: $crate::service::ServiceError) -> Self {
                Self(e.into())
            }
        }
    };
}
pub(crate) use error_responses;
