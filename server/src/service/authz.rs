//! Authorization: may this principal perform this operation on this workspace?
//!
//! [`Authorizer`] is the port the WASM policy engine will implement; [`ScopeAuthorizer`] is the
//! plain Rust default until then: DESIGN.md's scope table plus workspace membership.

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
    /// The scope DESIGN.md's table requires for the operation.
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyStatus {
    Forbidden,
    NotFound,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny { status: DenyStatus, reason: String },
}

pub trait Authorizer: Send + Sync {
    fn authorize(&self, request: &AuthzRequest<'_>) -> Decision;
}

/// Allows an operation when the token holds its scope and, for workspace routes, the workspace.
#[derive(Debug, Default, Clone, Copy)]
pub struct ScopeAuthorizer;

impl Authorizer for ScopeAuthorizer {
    fn authorize(&self, request: &AuthzRequest<'_>) -> Decision {
        let scope = request.operation.required_scope();
        if !request.principal.scopes.contains(scope) {
            return Decision::Deny {
                status: DenyStatus::Forbidden,
                reason: format!("the token lacks the scope {scope}"),
            };
        }
        if let Some(workspace) = request.workspace {
            let member = crate::domain::parse_uuid(workspace)
                .is_some_and(|id| request.principal.has_workspace(id));
            if !member {
                return Decision::Deny {
                    status: DenyStatus::Forbidden,
                    reason: "the token has no access to this workspace".into(),
                };
            }
        }
        Decision::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Scopes;
    use uuid::Uuid;

    fn principal(scopes: &[Scope], workspace: Uuid) -> Principal {
        Principal {
            token_id: Uuid::new_v4(),
            user_id: Uuid::new_v4(),
            organisation_id: Uuid::new_v4(),
            scopes: scopes.iter().copied().collect::<Scopes>(),
            workspace_ids: vec![workspace],
            environment_ids: vec![],
            expires_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn scope_and_membership_are_both_required() {
        let ws = Uuid::new_v4();
        let ws_str = ws.to_string();
        let other = Uuid::new_v4().to_string();
        let p = principal(&[Scope::ActivityRead], ws);
        let ask = |op, workspace| {
            ScopeAuthorizer.authorize(&AuthzRequest {
                principal: &p,
                operation: op,
                workspace,
            })
        };
        assert_eq!(ask(Operation::ReadActivity, Some(&ws_str)), Decision::Allow);
        assert!(matches!(
            ask(Operation::ReadActivity, Some(&other)),
            Decision::Deny { .. }
        ));
        assert!(matches!(
            ask(Operation::ReadActivity, Some("not-a-uuid")),
            Decision::Deny { .. }
        ));
        assert!(matches!(
            ask(Operation::ReadAuditStream, Some(&ws_str)),
            Decision::Deny { .. }
        ));
    }

    #[test]
    fn every_operation_requires_its_own_scope() {
        let ws = Uuid::new_v4();
        let ops = [
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
        for op in ops {
            let holder = principal(&[op.required_scope()], ws);
            let others: Vec<Scope> = Scope::ALL
                .into_iter()
                .filter(|s| *s != op.required_scope())
                .collect();
            let lacking = principal(&others, ws);
            let req = |p| AuthzRequest {
                principal: p,
                operation: op,
                workspace: None,
            };
            assert_eq!(
                ScopeAuthorizer.authorize(&req(&holder)),
                Decision::Allow,
                "{op:?}"
            );
            assert!(
                matches!(
                    ScopeAuthorizer.authorize(&req(&lacking)),
                    Decision::Deny { .. }
                ),
                "{op:?}"
            );
        }
    }
}
