//! The default authorizer as it was built against `control-plane:policy@1.0.0`, before the
//! principal had a role: the scope table and workspace membership. Kept, built into
//! `dist/authz-1.0.0.wasm`, so the server's tests prove a component of the older world still
//! installs and decides (`policy/tests.rs`).

wit_bindgen::generate!({ world: "authorizer", path: "../../wit-1.0.0" });

use control_plane::policy::types::{Denial, DenyStatus};

struct Authz;

/// The scope each operation requires: `Some(None)` for one any live token may perform,
/// `None` for an operation this policy does not know.
fn required_scope(operation: &str) -> Option<Option<&'static str>> {
    Some(Some(match operation {
        "issuePersonalAccessToken" => "tokens:issue",
        "revokeWorkspaceAccessToken" => "tokens:revoke",
        "deleteRunnerPool" => "runner-pools:delete",
        "submitRunnerCommand" => "runner-commands:submit",
        "streamAuditEvents" => "audit:read",
        "listActivity" => "activity:read",
        "requestWorkflowRevisionApproval" => "workflows:request-approval",
        "putOwnPluginReview" => "reviews:write",
        "reportPluginReview" => "reviews:report",
        // A token reading who it is.
        "getAuthenticatedCaller" => return Some(None),
        _ => return None,
    }))
}

fn deny(reason: String) -> AuthzDecision {
    AuthzDecision::Deny(Denial { status: DenyStatus::Forbidden, reason })
}

impl Guest for Authz {
    fn authorize(request: AuthzRequest) -> AuthzDecision {
        let Some(scope) = required_scope(&request.operation) else {
            return deny(format!("unknown operation {}", request.operation));
        };
        let principal = &request.principal;
        if let Some(scope) = scope
            && !principal.scopes.iter().any(|s| s == scope)
        {
            return deny(format!("the token lacks the scope {scope}"));
        }
        if let Some(workspace) = &request.workspace_id {
            // Ids are compared in their canonical form; the path may use upper case.
            let canonical = workspace.len() == 36 && workspace.is_ascii();
            let wanted = workspace.to_ascii_lowercase();
            if !canonical || !principal.workspace_ids.iter().any(|w| *w == wanted) {
                return deny("the token has no access to this workspace".into());
            }
        }
        AuthzDecision::Allow
    }
}

export!(Authz);
