// The default authorizer in JavaScript: docs/contract.md's scope table plus workspace
// membership, and the admin plane's role table. A port, rule for rule, of policies/authz/src/lib.rs; it passes the same
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
  ["listOwnTokens", null],
  ["revokeOwnToken", null],
]);

// The admin plane: an admin scope, and a user who administers the organisation of the path.
const ADMINISTER = new Map([
  ["listWorkspaces", "admin:read"],
  ["listEnvironments", "admin:read"],
  ["createWorkspace", "admin:write"],
  ["createEnvironment", "admin:write"],
  ["listUsers", "admin:read"],
  ["getUser", "admin:read"],
  ["createUser", "admin:write"],
  ["disableUser", "admin:write"],
  ["enableUser", "admin:write"],
  ["setUserRole", "admin:write"],
  ["issueUserToken", "admin:write"],
  ["listTokens", "admin:read"],
  ["getToken", "admin:read"],
  ["revokeToken", "admin:write"],
  ["rotateToken", "admin:write"],
  ["createRunnerPool", "admin:write"],
  ["listRunnerPools", "admin:read"],
  ["registerRunner", "admin:write"],
  ["listRunners", "admin:read"],
  ["setRunnerDeliveryUrl", "admin:write"],
  ["rotateRunnerWebhookSecret", "admin:write"],
  ["disableRunner", "admin:write"],
  ["enableRunner", "admin:write"],
  ["removeRunner", "admin:write"],
  ["addRunnerKey", "admin:write"],
  ["revokeRunnerKey", "admin:write"],
  ["listDeliveries", "admin:read"],
  ["getDelivery", "admin:read"],
  ["resendDelivery", "admin:write"],
  ["recoverDeliveries", "admin:write"],
  ["createWorkflow", "admin:write"],
  ["listWorkflows", "admin:read"],
  ["createWorkflowRevision", "admin:write"],
  ["approveWorkflowRevision", "admin:write"],
  ["rejectWorkflowRevision", "admin:write"],
  ["createPlugin", "admin:write"],
  ["listPlugins", "admin:read"],
  ["listPluginReviews", "admin:read"],
  ["restorePluginReview", "admin:write"],
  ["exportAuditLog", "admin:read"],
  ["verifyAuditLog", "admin:read"],
]);

// The instance: an admin scope, and an operator.
const OPERATE = new Map([
  ["listOrganisations", "admin:read"],
  ["createOrganisation", "admin:write"],
  ["setSelfApproval", "admin:write"],
  ["setAuditRetention", "admin:write"],
  ["purgeAuditLog", "admin:write"],
  ["installPolicy", "admin:write"],
  ["listPolicies", "admin:read"],
  ["getPolicy", "admin:read"],
  ["activatePolicy", "admin:write"],
  ["removePolicy", "admin:write"],
  ["rollBackPolicy", "admin:write"],
  ["setShadowPolicy", "admin:write"],
  ["listShadowDisagreements", "admin:read"],
  ["listPolicyDecisions", "admin:read"],
  ["listWebhookSigningKeys", "admin:read"],
]);

function deny(reason) {
  return { tag: "deny", val: { status: "forbidden", reason } };
}

// Rust's to_ascii_lowercase: only A-Z change.
function asciiLower(text) {
  return text.replace(/[A-Z]/g, (c) => c.toLowerCase());
}

// Ids are compared in their canonical form; the path may use upper case.
function canonical(text) {
  return text.length === 36 && /^[\x00-\x7f]*$/.test(text) ? asciiLower(text) : null;
}

export function authorize(request) {
  const operation = request.operation;
  const administer = ADMINISTER.has(operation);
  const operate = OPERATE.has(operation);
  if (!REQUIRED_SCOPE.has(operation) && !administer && !operate) {
    return deny(`unknown operation ${operation}`);
  }
  const scope = administer
    ? ADMINISTER.get(operation)
    : operate
      ? OPERATE.get(operation)
      : REQUIRED_SCOPE.get(operation);
  const principal = request.principal;
  if (scope !== null && !principal.scopes.includes(scope)) {
    return deny(`the token lacks the scope ${scope}`);
  }
  if (operate && principal.role !== "operator") {
    return deny("only an operator may do this");
  }
  if (administer) {
    if (principal.role === "member") {
      return deny("only an administrator may do this");
    }
    const named = request.resourceIds.find(([name]) => name === "organisationId");
    const organisation = named ? canonical(named[1]) : null;
    // An organisation the caller does not administer is not shown to exist.
    if (principal.role !== "operator" && organisation !== principal.organisationId) {
      return { tag: "deny", val: { status: "not-found", reason: "no such organisation" } };
    }
  }
  const workspace = request.workspaceId;
  if (workspace !== undefined && workspace !== null) {
    const wanted = canonical(workspace);
    if (wanted === null || !principal.workspaceIds.includes(wanted)) {
      return deny("the token has no access to this workspace");
    }
  }
  return { tag: "allow" };
}
