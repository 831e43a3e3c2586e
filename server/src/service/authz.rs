//! Authorization: may this principal perform this operation on this workspace?
//!
//! [`Authorizer`] is the port; the policy engine (`crate::policy`) implements it with the active
//! authorizer component. No scope check is written in Rust: the default policy in
//! `policies/authz` holds the scope table (docs/contract.md, "Operations at a glance") and the
//! workspace-membership rule (docs/design.md, "Authorization and moderation").

use crate::domain::{Principal, Scope};

/// Every bearer-authenticated operation of the v1 interface.
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
    /// The scope the operation requires: the table in docs/contract.md, "Operations at a glance".
    pub fn required_scope(self) -> Scope {
        match self {
            Operation::IssueToken => Scope::TokensIssue,
            Operation::RevokeToken => Scope::TokensRevoke,
            Operation::DeleteRunnerPool => Scope::RunnerPoolsDelete,
            Operation::SubmitRunnerCommand => Scope::RunnerCommandsSubmit,
            Operation::ReadAuditStream => Scope::AuditRead,
            Operation::ReadActivity => Scope::ActivityRead,
            Operation::RequestWorkflowApproval => Scope::WorkflowsRequestApproval,
            Operation::WriteReview => Scope::ReviewsWrite,
            Operation::ReportReview => Scope::ReviewsReport,
        }
    }

    /// HTTP method and route template, as the policy sees them.
    pub fn http(self) -> (&'static str, &'static str) {
        match self {
            Operation::IssueToken => ("POST", "/v1/personal-access-tokens"),
            Operation::RevokeToken => (
                "DELETE",
                "/v1/workspaces/{workspaceId}/access-tokens/{tokenId}",
            ),
            Operation::DeleteRunnerPool => (
                "DELETE",
                "/v1/workspaces/{workspaceId}/runner-pools/{poolId}",
            ),
            Operation::SubmitRunnerCommand => {
                ("POST", "/v1/workspaces/{workspaceId}/runner-commands")
            }
            Operation::ReadAuditStream => ("GET", "/v1/workspaces/{workspaceId}/audit/stream"),
            Operation::ReadActivity => ("GET", "/v1/workspaces/{workspaceId}/activity"),
            Operation::RequestWorkflowApproval => (
                "POST",
                "/v1/workspaces/{workspaceId}/workflows/{workflowId}/revisions/{revisionId}/request-approval",
            ),
            Operation::WriteReview => ("PUT", "/v1/marketplace/plugins/{pluginId}/reviews/me"),
            Operation::ReportReview => (
                "POST",
                "/v1/marketplace/plugins/{pluginId}/reviews/{reviewId}/report",
            ),
        }
    }

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

    pub fn id(self) -> &'static str {
        match self {
            Operation::IssueToken => "issuePersonalAccessToken",
            Operation::RevokeToken => "revokeWorkspaceAccessToken",
            Operation::DeleteRunnerPool => "deleteRunnerPool",
            Operation::SubmitRunnerCommand => "submitRunnerCommand",
            Operation::ReadAuditStream => "streamAuditEvents",
            Operation::ReadActivity => "listActivity",
            Operation::RequestWorkflowApproval => "requestWorkflowRevisionApproval",
            Operation::WriteReview => "putOwnPluginReview",
            Operation::ReportReview => "reportPluginReview",
        }
    }
}

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
