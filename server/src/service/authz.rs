//! Authorization: may this principal perform this operation on this workspace?
//!
//! [`Authorizer`] is the port; the policy engine (`crate::policy`) implements it with the active
//! authorizer component. No scope check is written in Rust: the default policy in
//! `policies/authz` holds the scope table (docs/contract.md, "Operations at a glance") and the
//! workspace-membership rule (docs/design.md, "Authorization and moderation").

pub use crate::domain::Operation;
use crate::domain::Principal;

/// One authorization question.
#[derive(Debug, Clone)]
pub struct AuthzRequest<'a> {
    pub principal: &'a Principal,
    pub operation: Operation,
    /// The workspace named in the path, as given (it may not be a uuid).
    pub workspace: Option<&'a str>,
    /// Other ids from the path, as (name, value).
    pub resources: Vec<(&'static str, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyStatus {
    Forbidden,
    NotFound,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny {
        status: DenyStatus,
        reason: String,
    },
    /// The policy could not decide (trap, timeout, memory): fail closed.
    Failed {
        reason: String,
    },
    /// The policy was not asked: no decision slot was free in time. Denied as well, but the
    /// client may retry (503 `unavailable`).
    Unavailable {
        reason: String,
    },
}

/// The port the service layer asks; the policy engine implements it.
#[async_trait::async_trait]
pub trait Authorizer: Send + Sync {
    async fn authorize(&self, request: &AuthzRequest<'_>) -> Decision;
}

/// Allows everything. Only for measuring what the policy costs (`--authorizer allow-all`), and
/// only in builds with the `bench-allow-all` feature.
#[cfg(feature = "bench-allow-all")]
#[derive(Debug, Default, Clone, Copy)]
pub struct AllowAllAuthorizer;

#[cfg(feature = "bench-allow-all")]
#[async_trait::async_trait]
impl Authorizer for AllowAllAuthorizer {
    async fn authorize(&self, _request: &AuthzRequest<'_>) -> Decision {
        Decision::Allow
    }
}
