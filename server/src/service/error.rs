use serde_json::Value;

use crate::domain::ValidationErrors;
use crate::storage::StoreError;

/// Every way an operation of the service layer can fail. The HTTP adapter maps each variant
/// to a status and an ApiError code in one place (`http::error`); `cpctl` prints its message.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ServiceError {
    #[error("invalid input: {0}")]
    Validation(ValidationErrors),
    #[error("missing, invalid, expired or revoked credentials")]
    Unauthenticated,
    /// A runner signature was refused; the reason names the check, never a key.
    #[error("{0}")]
    SignatureRejected(String),
    #[error("{reason}")]
    Forbidden {
        reason: String,
        details: Option<Value>,
    },
    #[error("{message}")]
    NotFound {
        message: String,
        details: Option<Value>,
    },
    #[error("{message}")]
    Conflict {
        code: &'static str,
        message: String,
        details: Option<Value>,
    },
    /// Understood and refused for what it holds (a policy component that is not one, of the
    /// wrong world, or over its budgets): a 422 with its own code.
    #[error("{message}")]
    Unprocessable {
        code: &'static str,
        message: String,
        details: Option<Value>,
    },
    /// A cursor or `Last-Event-ID` points into audit events retention has removed; `oldest` is
    /// the oldest sequence still kept.
    #[error("the cursor points into audit events that were removed; the oldest kept is {oldest}")]
    CursorExpired { oldest: i64 },
    /// The authorization policy could not decide (trap, timeout, memory): denied.
    #[error("the authorization policy failed; access denied")]
    PolicyError,
    #[error("a dependency is unavailable")]
    Unavailable,
    /// Too many audit streams open: the token's or the workspace's cap (a 429), or this
    /// process's (a 503); the client retries after [`super::STREAM_RETRY_AFTER`].
    #[error("too many open audit streams (the {} cap of {})", .0.scope.as_str(), .0.limit)]
    StreamCapReached(super::StreamCapReached),
    /// The string is for the log only; it never reaches a client.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ServiceError {
    pub fn forbidden(reason: impl Into<String>) -> Self {
        Self::Forbidden {
            reason: reason.into(),
            details: None,
        }
    }

    pub fn signature(reason: impl Into<String>) -> Self {
        Self::SignatureRejected(reason.into())
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::NotFound {
            message: message.into(),
            details: None,
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(cause) => {
                tracing::warn!(%cause, "records store unavailable");
                Self::Unavailable
            }
            StoreError::Conflict(rule) => Self::Conflict {
                code: "conflict",
                message: "the record already exists".into(),
                details: Some(serde_json::json!({ "rule": rule })),
            },
            StoreError::Internal(cause) => Self::Internal(cause),
        }
    }
}

impl From<ValidationErrors> for ServiceError {
    fn from(e: ValidationErrors) -> Self {
        Self::Validation(e)
    }
}
