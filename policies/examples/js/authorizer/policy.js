// The default authorizer in JavaScript: docs/contract.md's scope table plus workspace
// membership. A port, rule for rule, of policies/authz/src/lib.rs; it passes the same
// policies/authz/cases.json.

// The scope each operation requires; null: any live token may perform it.
const REQUIRED_SCOPE = new Map([
  ["issuePersonalAccessToken", "tokens:issue"],
  ["revokeWorkspaceAccessToken", "tokens:revoke"],
  ["deleteRunnerPool", "runner-pools:delete"],
  ["submitRunnerCommand", "runner-commands:submit"],
  ["streamAuditEvents", "audit:read"],
  ["listActivity", "activity:read"],
  ["requestWorkflowRevisionApproval", "workflows:request-approval"],
  ["putOwnPluginReview", "reviews:write"],
  ["reportPluginReview", "reviews:report"],
  ["getAuthenticatedCaller", null],
]);

function deny(reason) {
  return { tag: "deny", val: { status: "forbidden", reason } };
}

// Rust's to_ascii_lowercase: only A-Z change.
function asciiLower(text) {
  return text.replace(/[A-Z]/g, (c) => c.toLowerCase());
}

export function authorize(request) {
  if (!REQUIRED_SCOPE.has(request.operation)) {
    return deny(`unknown operation ${request.operation}`);
  }
  const scope = REQUIRED_SCOPE.get(request.operation);
  const principal = request.principal;
  if (scope !== null && !principal.scopes.includes(scope)) {
    return deny(`the token lacks the scope ${scope}`);
  }
  const workspace = request.workspaceId;
  if (workspace !== undefined && workspace !== null) {
    // Ids are compared in their canonical form; the path may use upper case.
    const canonical = workspace.length === 36 && /^[\x00-\x7f]*$/.test(workspace);
    if (!canonical || !principal.workspaceIds.includes(asciiLower(workspace))) {
      return deny("the token has no access to this workspace");
    }
  }
  return { tag: "allow" };
}
