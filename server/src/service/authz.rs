//! Authorization: may this principal perform this operation on this workspace?
//!
//! [`Authorizer`] is the port; the policy engine (`crate::policy`) implements it with the active
//! authorizer component. No scope check is written in Rust: the default policy in
//! `policies/authz` holds the scope table (docs/contract.md, "Operations at a glance") and the
//! workspace-membership rule (docs/design.md, "Authorization and moderation").

use crate::domain::operation::{self, OperationSpec};
use crate::domain::{Principal, Scope};

/// Every bearer-authenticated operation of the v1 interface: the bearer rows of the operation
/// table (`domain::operation`), one variant each, so the service can name the one it asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    IssueToken,
    RevokeToken,
    DeleteRunnerPool,
    SubmitRunnerCommand,
    ReadAuditStream,
    ReadActivity,
    RequestWorkflowApproval,
    WriteReview,
    ReportReview,
}

impl Operation {
    pub const ALL: [Operation; 9] = [
        Operation::IssueToken,
        Operation::RevokeToken,
        Operation::DeleteRunnerPool,
        Operation::SubmitRunnerCommand,
        Operation::ReadAuditStream,
        Operation::ReadActivity,
        Operation::RequestWorkflowApproval,
        Operation::WriteReview,
        Operation::ReportReview,
    ];

    /// The operation's row in the table.
    pub const fn spec(self) -> &'static OperationSpec {
        match self {
            Operation::IssueToken => &operation::ISSUE_TOKEN,
            Operation::RevokeToken => &operation::REVOKE_TOKEN,
            Operation::DeleteRunnerPool => &operation::DELETE_RUNNER_POOL,
            Operation::SubmitRunnerCommand => &operation::SUBMIT_RUNNER_COMMAND,
            Operation::ReadAuditStream => &operation::STREAM_AUDIT_EVENTS,
            Operation::ReadActivity => &operation::LIST_ACTIVITY,
            Operation::RequestWorkflowApproval => &operation::REQUEST_WORKFLOW_APPROVAL,
            Operation::WriteReview => &operation::WRITE_REVIEW,
            Operation::ReportReview => &operation::REPORT_REVIEW,
        }
    }

    /// The scope the operation requires (docs/contract.md, "Operations at a glance").
    pub fn required_scope(self) -> Scope {
        match self.spec().scope() {
            Some(scope) => scope,
            // Every variant names a bearer row: checked when this crate compiles, below.
            None => unreachable!("a bearer operation without a scope"),
        }
    }

    /// HTTP method and route template, as the policy sees them.
    pub fn http(self) -> (&'static str, &'static str) {
        let spec = self.spec();
        (spec.method, spec.route)
    }

    pub fn id(self) -> &'static str {
        self.spec().id
    }
}

// Every variant names a bearer row, so `required_scope` cannot reach its `unreachable!`.
const _: () = {
    let mut i = 0;
    while i < Operation::ALL.len() {
        assert!(Operation::ALL[i].spec().scope().is_some());
        i += 1;
    }
};

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
