"""The default authorizer in Python: docs/contract.md's scope table plus workspace membership.

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
}


def deny(reason: str) -> AuthzDecision:
    return AuthzDecision_Deny(Denial(DenyStatus.FORBIDDEN, reason))


def ascii_lower(text: str) -> str:
    # Rust's to_ascii_lowercase: only A-Z change, so no other character can match by accident.
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


class WitWorld(wit_world.WitWorld):
    def authorize(self, request: AuthzRequest) -> AuthzDecision:
        if request.operation not in REQUIRED_SCOPE:
            return deny(f"unknown operation {request.operation}")
        scope = REQUIRED_SCOPE[request.operation]
        principal = request.principal
        if scope is not None and scope not in principal.scopes:
            return deny(f"the token lacks the scope {scope}")
        workspace = request.workspace_id
        if workspace is not None:
            # Ids are compared in their canonical form; the path may use upper case.
            canonical = len(workspace) == 36 and workspace.isascii()
            if not canonical or ascii_lower(workspace) not in principal.workspace_ids:
                return deny("the token has no access to this workspace")
        return AuthzDecision_Allow()
