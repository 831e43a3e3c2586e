"""The default authorizer in Python: docs/contract.md's scope table plus workspace membership,
and the admin plane's role table.

A port, rule for rule, of policies/authz/src/lib.rs; it passes the same policies/authz/cases.json.
"""

import wit_world
from wit_world.imports.types import (
    AuthzDecision,
    AuthzDecision_Allow,
    AuthzDecision_Deny,
    AuthzRequest,
    Denial,
    DenyStatus,
    Role,
)

# The scope each operation requires; None: any live token may perform it.
REQUIRED_SCOPE = {
    "issuePersonalAccessToken": "tokens:issue",
    "revokeWorkspaceAccessToken": "tokens:revoke",
    "deleteRunnerPool": "runner-pools:delete",
    "submitRunnerCommand": "runner-commands:submit",
    "streamAuditEvents": "audit:read",
    "listActivity": "activity:read",
    "requestWorkflowRevisionApproval": "workflows:request-approval",
    "putOwnPluginReview": "reviews:write",
    "reportPluginReview": "reviews:report",
    "getAuthenticatedCaller": None,
    "listOwnTokens": None,
    "revokeOwnToken": None,
}

# The admin plane: an admin scope, and a user who administers the organisation of the path.
ADMINISTER = {
    "listWorkspaces": "admin:read",
    "listEnvironments": "admin:read",
    "createWorkspace": "admin:write",
    "createEnvironment": "admin:write",
    "listUsers": "admin:read",
    "getUser": "admin:read",
    "createUser": "admin:write",
    "disableUser": "admin:write",
    "enableUser": "admin:write",
    "setUserRole": "admin:write",
    "issueUserToken": "admin:write",
    "listTokens": "admin:read",
    "getToken": "admin:read",
    "revokeToken": "admin:write",
    "rotateToken": "admin:write",
    "createRunnerPool": "admin:write",
    "listRunnerPools": "admin:read",
    "registerRunner": "admin:write",
    "listRunners": "admin:read",
    "setRunnerDeliveryUrl": "admin:write",
    "rotateRunnerWebhookSecret": "admin:write",
    "disableRunner": "admin:write",
    "enableRunner": "admin:write",
    "removeRunner": "admin:write",
    "addRunnerKey": "admin:write",
    "revokeRunnerKey": "admin:write",
    "listDeliveries": "admin:read",
    "getDelivery": "admin:read",
    "resendDelivery": "admin:write",
    "recoverDeliveries": "admin:write",
    "createWorkflow": "admin:write",
    "listWorkflows": "admin:read",
    "createWorkflowRevision": "admin:write",
    "approveWorkflowRevision": "admin:write",
    "rejectWorkflowRevision": "admin:write",
    "createPlugin": "admin:write",
    "listPlugins": "admin:read",
    "listPluginReviews": "admin:read",
    "restorePluginReview": "admin:write",
    "exportAuditLog": "admin:read",
    "verifyAuditLog": "admin:read",
}

# The instance: an admin scope, and an operator.
OPERATE = {
    "listOrganisations": "admin:read",
    "createOrganisation": "admin:write",
    "setSelfApproval": "admin:write",
    "setAuditRetention": "admin:write",
    "purgeAuditLog": "admin:write",
    "installPolicy": "admin:write",
    "listPolicies": "admin:read",
    "getPolicy": "admin:read",
    "activatePolicy": "admin:write",
    "removePolicy": "admin:write",
    "rollBackPolicy": "admin:write",
    "setShadowPolicy": "admin:write",
    "listShadowDisagreements": "admin:read",
    "listPolicyDecisions": "admin:read",
    "listWebhookSigningKeys": "admin:read",
}


def deny(reason: str) -> AuthzDecision:
    return AuthzDecision_Deny(Denial(DenyStatus.FORBIDDEN, reason))


def ascii_lower(text: str) -> str:
    # Rust's to_ascii_lowercase: only A-Z change, so no other character can match by accident.
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def canonical(text: str):
    # Ids are compared in their canonical form; the path may use upper case.
    return ascii_lower(text) if len(text) == 36 and text.isascii() else None


class WitWorld(wit_world.WitWorld):
    def authorize(self, request: AuthzRequest) -> AuthzDecision:
        operation = request.operation
        known = operation in REQUIRED_SCOPE or operation in ADMINISTER or operation in OPERATE
        if not known:
            return deny(f"unknown operation {operation}")
        scope = REQUIRED_SCOPE.get(operation, ADMINISTER.get(operation, OPERATE.get(operation)))
        principal = request.principal
        if scope is not None and scope not in principal.scopes:
            return deny(f"the token lacks the scope {scope}")
        if operation in OPERATE and principal.role != Role.OPERATOR:
            return deny("only an operator may do this")
        if operation in ADMINISTER:
            if principal.role == Role.MEMBER:
                return deny("only an administrator may do this")
            named = [v for (k, v) in request.resource_ids if k == "organisationId"]
            organisation = canonical(named[0]) if named else None
            # An organisation the caller does not administer is not shown to exist.
            if principal.role != Role.OPERATOR and organisation != principal.organisation_id:
                return AuthzDecision_Deny(Denial(DenyStatus.NOT_FOUND, "no such organisation"))
        workspace = request.workspace_id
        if workspace is not None:
            wanted = canonical(workspace)
            if wanted is None or wanted not in principal.workspace_ids:
                return deny("the token has no access to this workspace")
        return AuthzDecision_Allow()
