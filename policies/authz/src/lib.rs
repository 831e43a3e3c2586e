//! The default authorization policy: docs/contract.md's scope table plus workspace membership,
//! and the admin plane's role table (docs/design.md, "Principals and roles").

wit_bindgen::generate!({ world: "authorizer", path: "../wit" });

use control_plane::policy::types::{Denial, DenyStatus, Role};

struct Authz;

/// What an operation asks of its caller.
enum Rule {
    /// A scope, and membership of the workspace the path names (if it names one).
    Scope(&'static str),
    /// Any live token.
    AnyToken,
    /// The admin plane: an admin scope, and a user who administers the organisation the
    /// path names (its `admin`, or an `operator`, who administers every one).
    Administer(&'static str),
    /// The instance: an admin scope, and an `operator`.
    Operate(&'static str),
}

/// Each operation's rule; `None` for an operation this policy does not know.
fn rule(operation: &str) -> Option<Rule> {
    Some(match operation {
        "issuePersonalAccessToken" => Rule::Scope("tokens:issue"),
        "revokeWorkspaceAccessToken" => Rule::Scope("tokens:revoke"),
        "deleteRunnerPool" => Rule::Scope("runner-pools:delete"),
        "submitRunnerCommand" => Rule::Scope("runner-commands:submit"),
        "streamAuditEvents" => Rule::Scope("audit:read"),
        "listActivity" => Rule::Scope("activity:read"),
        "requestWorkflowRevisionApproval" => Rule::Scope("workflows:request-approval"),
        "putOwnPluginReview" => Rule::Scope("reviews:write"),
        "reportPluginReview" => Rule::Scope("reviews:report"),
        // A token reading who it is, and its own user's tokens (list, revoke one).
        "getAuthenticatedCaller" | "listOwnTokens" | "revokeOwnToken" => Rule::AnyToken,
        "listOrganisations" => Rule::Operate("admin:read"),
        "createOrganisation" => Rule::Operate("admin:write"),
        "listWorkspaces" | "listEnvironments" | "listUsers" | "getUser" | "listTokens"
        | "getToken" => Rule::Administer("admin:read"),
        "createWorkspace" | "createEnvironment" | "createUser" | "disableUser" | "enableUser"
        | "setUserRole" | "issueUserToken" | "revokeToken" | "rotateToken" => {
            Rule::Administer("admin:write")
        }
        // Part 2: the fleet, workflows, plugins and the audit log of an organisation.
        "listRunnerPools" | "listRunners" | "listDeliveries" | "getDelivery" | "listWorkflows"
        | "listPlugins" | "listPluginReviews" | "exportAuditLog" | "verifyAuditLog" => Rule::Administer("admin:read"),
        "createRunnerPool" | "registerRunner" | "setRunnerDeliveryUrl"
        | "rotateRunnerWebhookSecret" | "disableRunner" | "enableRunner" | "removeRunner"
        | "addRunnerKey" | "revokeRunnerKey" | "resendDelivery" | "recoverDeliveries"
        | "createWorkflow" | "createWorkflowRevision" | "approveWorkflowRevision"
        | "rejectWorkflowRevision" | "createPlugin" | "restorePluginReview" => {
            Rule::Administer("admin:write")
        }
        // Part 2: the instance's policies, keys, retention and purge, and the four-eyes rule.
        "listPolicies" | "getPolicy" | "listShadowDisagreements" | "listPolicyDecisions"
        | "listWebhookSigningKeys" => Rule::Operate("admin:read"),
        "setSelfApproval" | "setAuditRetention" | "purgeAuditLog" | "installPolicy"
        | "activatePolicy" | "removePolicy" | "rollBackPolicy" | "setShadowPolicy" => {
            Rule::Operate("admin:write")
        }
        _ => return None,
    })
}

fn deny(reason: String) -> AuthzDecision {
    AuthzDecision::Deny(Denial { status: DenyStatus::Forbidden, reason })
}

/// Ids are compared in their canonical form; the path may use upper case.
fn canonical(id: &str) -> Option<String> {
    (id.len() == 36 && id.is_ascii()).then(|| id.to_ascii_lowercase())
}

impl Guest for Authz {
    fn authorize(request: AuthzRequest) -> AuthzDecision {
        let Some(rule) = rule(&request.operation) else {
            return deny(format!("unknown operation {}", request.operation));
        };
        let principal = &request.principal;
        let scope = match rule {
            Rule::Scope(scope) | Rule::Administer(scope) | Rule::Operate(scope) => Some(scope),
            Rule::AnyToken => None,
        };
        if let Some(scope) = scope
            && !principal.scopes.iter().any(|s| s == scope)
        {
            return deny(format!("the token lacks the scope {scope}"));
        }
        if let Rule::Operate(_) = rule
            && principal.role != Role::Operator
        {
            return deny("only an operator may do this".into());
        }
        if let Rule::Administer(_) = rule {
            if principal.role == Role::Member {
                return deny("only an administrator may do this".into());
            }
            let organisation = request
                .resource_ids
                .iter()
                .find(|(name, _)| name == "organisationId")
                .and_then(|(_, id)| canonical(id));
            // An organisation the caller does not administer is not shown to exist.
            let own = organisation.as_deref() == Some(principal.organisation_id.as_str());
            if principal.role != Role::Operator && !own {
                return AuthzDecision::Deny(Denial {
                    status: DenyStatus::NotFound,
                    reason: "no such organisation".into(),
                });
            }
        }
        if let Some(workspace) = &request.workspace_id {
            let member = canonical(workspace)
                .is_some_and(|wanted| principal.workspace_ids.iter().any(|w| *w == wanted));
            if !member {
                return deny("the token has no access to this workspace".into());
            }
        }
        AuthzDecision::Allow
    }
}

export!(Authz);
