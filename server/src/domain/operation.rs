//! The v1 operations, each declared once: its id, method, route, how its caller is
//! authenticated (and the scope a bearer token needs), the rate class it spends, whether it
//! takes an `Idempotency-Key`, and the audit event types it writes.
//!
//! Everything else reads the declaration: the service names an [`Operation`] when it asks the
//! authorizer (whose question carries the id, method, route and scope), each handler's
//! endpoint carries its operation (`http/api/mod.rs`, `admitted`), so the rate class, the
//! idempotency record, the metrics label and the policy question come from it and no request
//! looks its route up; the document's headers and `x-audit-events` come from it too. The
//! routes themselves are still written in the `#[oai(...)]` attributes, because poem-openapi
//! reads only literals there; a test in `http/docs.rs` holds this table and the generated
//! document to the same operations, so neither can change alone.

use super::Scope;

/// Which budgets a request spends besides its caller's general one (see `http/limits.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateClass {
    Read,
    Write,
    /// Token issuance: also the user's issuance budget; refused while the limiter is down.
    Issue,
}

impl RateClass {
    /// The class of a request that names no operation (a 404, a 405): only its method is known.
    pub fn of_method(method: &str) -> Self {
        if matches!(method, "GET" | "HEAD") {
            RateClass::Read
        } else {
            RateClass::Write
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RateClass::Read => "read",
            RateClass::Write => "write",
            RateClass::Issue => "issue",
        }
    }
}

/// How an operation's caller proves who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// A personal access token (`Authorization: Bearer`), which must hold the scope.
    Bearer(Scope),
    /// A personal access token, whatever scopes it holds (the authorizer is still asked).
    AnyToken,
    /// A runner's signature over the request (the `x-sandbox-*` headers), never a token.
    RunnerSigned,
    /// Nobody: no v1 operation is open today; the variant keeps the table able to say so.
    None,
}

/// One v1 operation's declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationSpec {
    pub operation: Operation,
    /// The OpenAPI `operationId`, also the `operation` label of the metrics.
    pub id: &'static str,
    /// Upper case, as on the wire.
    pub method: &'static str,
    /// The document's template: `/v1/...` with `{name}` variables.
    pub route: &'static str,
    pub auth: Auth,
    pub rate: RateClass,
    /// Takes an `Idempotency-Key` (its input is read by `http::idempotency::Idempotent`).
    pub idempotent: bool,
    /// The audit event types a successful run writes (`x-audit-events` in the document).
    pub audit: &'static [&'static str],
}

impl OperationSpec {
    /// The scope a bearer token needs; `None` for an operation not authenticated by a token.
    pub const fn scope(&self) -> Option<Scope> {
        match self.auth {
            Auth::Bearer(scope) => Some(scope),
            Auth::AnyToken | Auth::RunnerSigned | Auth::None => None,
        }
    }

    /// The position of the route variable `name` (`{workspaceId}` is 0 in its route): poem's
    /// router names variables by position (`:param0`), the declaration by name.
    pub fn variable_index(&self, name: &str) -> Option<usize> {
        self.route
            .split('/')
            .filter(|segment| segment.starts_with('{'))
            .position(|segment| segment.trim_matches(['{', '}']) == name)
    }
}

/// Declares the operations: one row each, in the order of docs/contract.md ("Operations at a
/// glance"), which is also [`Operation::ALL`]'s and [`OPERATIONS`]'s.
macro_rules! operations {
    ($(
        $(#[$doc:meta])*
        $variant:ident {
            id: $id:literal,
            route: $method:literal $route:literal,
            auth: $auth:expr,
            rate: $rate:ident,
            idempotent: $idempotent:literal,
            audit: [$($audit:literal),* $(,)?] $(,)?
        }
    )*) => {
        /// A v1 operation; its declaration is [`Operation::spec`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Operation {
            $($(#[$doc])* $variant,)*
        }

        impl Operation {
            pub const ALL: [Operation; [$(stringify!($variant)),*].len()] =
                [$(Operation::$variant),*];
        }

        /// Every operation's declaration, indexed by [`Operation`].
        pub static OPERATIONS: [OperationSpec; Operation::ALL.len()] = [$(
            OperationSpec {
                operation: Operation::$variant,
                id: $id,
                method: $method,
                route: $route,
                auth: $auth,
                rate: RateClass::$rate,
                idempotent: $idempotent,
                audit: &[$($audit),*],
            },
        )*];
    };
}

operations! {
    IssueToken {
        id: "issuePersonalAccessToken",
        route: "POST" "/v1/personal-access-tokens",
        auth: Auth::Bearer(Scope::TokensIssue),
        rate: Issue,
        idempotent: true,
        audit: ["token.issued"],
    }
    RevokeToken {
        id: "revokeWorkspaceAccessToken",
        route: "DELETE" "/v1/workspaces/{workspaceId}/access-tokens/{tokenId}",
        auth: Auth::Bearer(Scope::TokensRevoke),
        rate: Write,
        idempotent: true,
        audit: ["token.workspace_access_revoked"],
    }
    DeleteRunnerPool {
        id: "deleteRunnerPool",
        route: "DELETE" "/v1/workspaces/{workspaceId}/runner-pools/{poolId}",
        auth: Auth::Bearer(Scope::RunnerPoolsDelete),
        rate: Write,
        idempotent: true,
        audit: ["runner_pool.deleted"],
    }
    SubmitRunnerCommand {
        id: "submitRunnerCommand",
        route: "POST" "/v1/workspaces/{workspaceId}/runner-commands",
        auth: Auth::Bearer(Scope::RunnerCommandsSubmit),
        rate: Write,
        idempotent: true,
        audit: ["runner_command.submitted"],
    }
    ReadAuditStream {
        id: "streamAuditEvents",
        route: "GET" "/v1/workspaces/{workspaceId}/audit/stream",
        auth: Auth::Bearer(Scope::AuditRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    ReadActivity {
        id: "listActivity",
        route: "GET" "/v1/workspaces/{workspaceId}/activity",
        auth: Auth::Bearer(Scope::ActivityRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    ReportDeliveryStatus {
        id: "reportDeliveryStatus",
        route: "POST" "/v1/runner/webhook-deliveries/{deliveryId}/status",
        auth: Auth::RunnerSigned,
        rate: Write,
        idempotent: true,
        audit: ["webhook_delivery.status_reported"],
    }
    RequestWorkflowApproval {
        id: "requestWorkflowRevisionApproval",
        route: "POST" "/v1/workspaces/{workspaceId}/workflows/{workflowId}/revisions/{revisionId}/request-approval",
        auth: Auth::Bearer(Scope::WorkflowsRequestApproval),
        rate: Write,
        idempotent: true,
        audit: ["workflow_revision.approval_requested"],
    }
    ReportReview {
        id: "reportPluginReview",
        route: "POST" "/v1/marketplace/plugins/{pluginId}/reviews/{reviewId}/report",
        auth: Auth::Bearer(Scope::ReviewsReport),
        rate: Write,
        idempotent: true,
        audit: ["review.reported"],
    }
    WriteReview {
        id: "putOwnPluginReview",
        route: "PUT" "/v1/marketplace/plugins/{pluginId}/reviews/me",
        auth: Auth::Bearer(Scope::ReviewsWrite),
        rate: Write,
        idempotent: true,
        audit: ["review.created", "review.replaced"],
    }
    // Beyond the contract's ten: the admin plane (docs/contract.md, "Beyond the contract").
    GetCaller {
        id: "getAuthenticatedCaller",
        route: "GET" "/v1/me",
        auth: Auth::AnyToken,
        rate: Read,
        idempotent: false,
        audit: [],
    }
    /// The tokens of the caller's own user.
    ListOwnTokens {
        id: "listOwnTokens",
        route: "GET" "/v1/me/tokens",
        auth: Auth::AnyToken,
        rate: Read,
        idempotent: false,
        audit: [],
    }
    /// A revocation of one of the caller's own user's tokens (itself included).
    RevokeOwnToken {
        id: "revokeOwnToken",
        route: "POST" "/v1/me/tokens/{tokenId}/revoke",
        auth: Auth::AnyToken,
        rate: Write,
        idempotent: true,
        audit: ["token.workspace_access_revoked"],
    }
    CreateOrganisation {
        id: "createOrganisation",
        route: "POST" "/v1/organisations",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["organisation.created"],
    }
    ListOrganisations {
        id: "listOrganisations",
        route: "GET" "/v1/organisations",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    CreateWorkspace {
        id: "createWorkspace",
        route: "POST" "/v1/organisations/{organisationId}/workspaces",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["workspace.created"],
    }
    ListWorkspaces {
        id: "listWorkspaces",
        route: "GET" "/v1/organisations/{organisationId}/workspaces",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    CreateEnvironment {
        id: "createEnvironment",
        route: "POST" "/v1/organisations/{organisationId}/workspaces/{workspaceId}/environments",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["environment.created"],
    }
    ListEnvironments {
        id: "listEnvironments",
        route: "GET" "/v1/organisations/{organisationId}/workspaces/{workspaceId}/environments",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    CreateUser {
        id: "createUser",
        route: "POST" "/v1/organisations/{organisationId}/users",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["user.created"],
    }
    ListUsers {
        id: "listUsers",
        route: "GET" "/v1/organisations/{organisationId}/users",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    GetUser {
        id: "getUser",
        route: "GET" "/v1/organisations/{organisationId}/users/{userId}",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    DisableUser {
        id: "disableUser",
        route: "POST" "/v1/organisations/{organisationId}/users/{userId}/disable",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["user.disabled"],
    }
    EnableUser {
        id: "enableUser",
        route: "POST" "/v1/organisations/{organisationId}/users/{userId}/enable",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["user.enabled"],
    }
    SetUserRole {
        id: "setUserRole",
        route: "PUT" "/v1/organisations/{organisationId}/users/{userId}/role",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["user.role_changed"],
    }
    IssueUserToken {
        id: "issueUserToken",
        route: "POST" "/v1/organisations/{organisationId}/users/{userId}/tokens",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["token.issued"],
    }
    ListTokens {
        id: "listTokens",
        route: "GET" "/v1/organisations/{organisationId}/tokens",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    GetToken {
        id: "getToken",
        route: "GET" "/v1/organisations/{organisationId}/tokens/{tokenId}",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    RevokeTokenAsAdmin {
        id: "revokeToken",
        route: "POST" "/v1/organisations/{organisationId}/tokens/{tokenId}/revoke",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["token.workspace_access_revoked"],
    }
    RotateToken {
        id: "rotateToken",
        route: "POST" "/v1/organisations/{organisationId}/tokens/{tokenId}/rotate",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["token.rotated"],
    }
    // Part 2: the fleet (an organisation's pools, runners and their keys, deliveries).
    CreateRunnerPool {
        id: "createRunnerPool",
        route: "POST" "/v1/organisations/{organisationId}/workspaces/{workspaceId}/runner-pools",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["runner_pool.created"],
    }
    ListRunnerPools {
        id: "listRunnerPools",
        route: "GET" "/v1/organisations/{organisationId}/workspaces/{workspaceId}/runner-pools",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    RegisterRunner {
        id: "registerRunner",
        route: "POST" "/v1/organisations/{organisationId}/runner-pools/{poolId}/runners",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["runner.registered"],
    }
    ListRunners {
        id: "listRunners",
        route: "GET" "/v1/organisations/{organisationId}/runner-pools/{poolId}/runners",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    SetRunnerDeliveryUrl {
        id: "setRunnerDeliveryUrl",
        route: "PUT" "/v1/organisations/{organisationId}/runners/{runnerId}/delivery-url",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["runner.delivery_url_set"],
    }
    RotateRunnerWebhookSecret {
        id: "rotateRunnerWebhookSecret",
        route: "POST" "/v1/organisations/{organisationId}/runners/{runnerId}/webhook-secret/rotate",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["runner.webhook_secret_rotated"],
    }
    DisableRunner {
        id: "disableRunner",
        route: "POST" "/v1/organisations/{organisationId}/runners/{runnerId}/disable",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["runner.disabled"],
    }
    EnableRunner {
        id: "enableRunner",
        route: "POST" "/v1/organisations/{organisationId}/runners/{runnerId}/enable",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["runner.enabled"],
    }
    RemoveRunner {
        id: "removeRunner",
        route: "DELETE" "/v1/organisations/{organisationId}/runners/{runnerId}",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["runner.removed"],
    }
    AddRunnerKey {
        id: "addRunnerKey",
        route: "POST" "/v1/organisations/{organisationId}/runners/{runnerId}/keys",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["runner.key_added"],
    }
    RevokeRunnerKey {
        id: "revokeRunnerKey",
        route: "DELETE" "/v1/organisations/{organisationId}/runners/{runnerId}/keys/{keyId}",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["runner.key_revoked"],
    }
    ListDeliveries {
        id: "listDeliveries",
        route: "GET" "/v1/organisations/{organisationId}/runner-pools/{poolId}/deliveries",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    GetDelivery {
        id: "getDelivery",
        route: "GET" "/v1/organisations/{organisationId}/deliveries/{deliveryId}",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    ResendDelivery {
        id: "resendDelivery",
        route: "POST" "/v1/organisations/{organisationId}/deliveries/{deliveryId}/resend",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        // A failed delivery is resent as a new command, submitted like any other.
        audit: ["webhook_delivery.resent", "runner_command.submitted"],
    }
    RecoverDeliveries {
        id: "recoverDeliveries",
        route: "POST" "/v1/organisations/{organisationId}/runner-pools/{poolId}/deliveries/recover",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        // A failed delivery is resent as a new command, submitted like any other.
        audit: ["webhook_delivery.resent", "runner_command.submitted"],
    }
    // Part 2: workflows and their approvals, plugins and their reviews.
    CreateWorkflow {
        id: "createWorkflow",
        route: "POST" "/v1/organisations/{organisationId}/workspaces/{workspaceId}/workflows",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["workflow.created"],
    }
    ListWorkflows {
        id: "listWorkflows",
        route: "GET" "/v1/organisations/{organisationId}/workspaces/{workspaceId}/workflows",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    CreateWorkflowRevision {
        id: "createWorkflowRevision",
        route: "POST" "/v1/organisations/{organisationId}/workflows/{workflowId}/revisions",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["workflow_revision.created"],
    }
    ApproveWorkflowRevision {
        id: "approveWorkflowRevision",
        route: "POST" "/v1/organisations/{organisationId}/workflows/{workflowId}/revisions/{revisionId}/approve",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["workflow_revision.approved"],
    }
    RejectWorkflowRevision {
        id: "rejectWorkflowRevision",
        route: "POST" "/v1/organisations/{organisationId}/workflows/{workflowId}/revisions/{revisionId}/reject",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["workflow_revision.rejected"],
    }
    SetSelfApproval {
        id: "setSelfApproval",
        route: "PUT" "/v1/organisations/{organisationId}/self-approval",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["organisation.self_approval_set"],
    }
    CreatePlugin {
        id: "createPlugin",
        route: "POST" "/v1/organisations/{organisationId}/plugins",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["plugin.created"],
    }
    ListPlugins {
        id: "listPlugins",
        route: "GET" "/v1/organisations/{organisationId}/plugins",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    ListPluginReviews {
        id: "listPluginReviews",
        route: "GET" "/v1/organisations/{organisationId}/plugins/{pluginId}/reviews",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    RestorePluginReview {
        id: "restorePluginReview",
        route: "POST" "/v1/organisations/{organisationId}/plugins/{pluginId}/reviews/{reviewId}/restore",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["review.restored"],
    }
    // Part 2: the audit log of a workspace, and the instance's retention.
    ExportAuditLog {
        id: "exportAuditLog",
        route: "GET" "/v1/organisations/{organisationId}/workspaces/{workspaceId}/audit/export",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    VerifyAuditLog {
        id: "verifyAuditLog",
        route: "GET" "/v1/organisations/{organisationId}/workspaces/{workspaceId}/audit/verification",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    SetAuditRetention {
        id: "setAuditRetention",
        route: "PUT" "/v1/organisations/{organisationId}/audit-retention",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["organisation.audit_retention_set"],
    }
    PurgeAuditLog {
        id: "purgeAuditLog",
        route: "POST" "/v1/audit/purge",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["audit.purged"],
    }
    // Part 2: the instance's policies and webhook signing keys (an operator's).
    InstallPolicy {
        id: "installPolicy",
        route: "POST" "/v1/policies",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["policy.installed"],
    }
    ListPolicies {
        id: "listPolicies",
        route: "GET" "/v1/policies",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    GetPolicy {
        id: "getPolicy",
        route: "GET" "/v1/policies/{policyName}/versions/{version}",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    ActivatePolicy {
        id: "activatePolicy",
        route: "POST" "/v1/policies/{policyName}/versions/{version}/activate",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["policy.activated"],
    }
    RemovePolicy {
        id: "removePolicy",
        route: "DELETE" "/v1/policies/{policyName}/versions/{version}",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["policy.removed"],
    }
    RollBackPolicy {
        id: "rollBackPolicy",
        route: "POST" "/v1/policies/rollback",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["policy.rolled_back"],
    }
    SetShadowPolicy {
        id: "setShadowPolicy",
        route: "PUT" "/v1/policies/shadow",
        auth: Auth::Bearer(Scope::AdminWrite),
        rate: Write,
        idempotent: true,
        audit: ["policy.shadow_set"],
    }
    ListShadowDisagreements {
        id: "listShadowDisagreements",
        route: "GET" "/v1/policies/shadow/disagreements",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    ListPolicyDecisions {
        id: "listPolicyDecisions",
        route: "GET" "/v1/policies/decisions",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
    ListWebhookSigningKeys {
        id: "listWebhookSigningKeys",
        route: "GET" "/v1/webhook-signing-keys",
        auth: Auth::Bearer(Scope::AdminRead),
        rate: Read,
        idempotent: false,
        audit: [],
    }
}

impl Operation {
    /// The operation's declaration.
    pub const fn spec(self) -> &'static OperationSpec {
        &OPERATIONS[self as usize]
    }

    pub const fn id(self) -> &'static str {
        self.spec().id
    }

    /// HTTP method and route template, as the policy sees them.
    pub const fn http(self) -> (&'static str, &'static str) {
        let spec = self.spec();
        (spec.method, spec.route)
    }

    /// The scope a bearer token needs; `None` for a runner's signed operation.
    pub const fn required_scope(self) -> Option<Scope> {
        self.spec().scope()
    }

    /// The route variables, by name, in their order (`organisationId`, `userId`).
    pub fn variables(self) -> impl Iterator<Item = &'static str> {
        self.spec()
            .route
            .split('/')
            .filter(|segment| segment.starts_with('{'))
            .map(|segment| segment.trim_matches(['{', '}']))
    }

    /// An operation of the admin plane: its token needs an admin scope, and it acts on the
    /// instance's organisations or on the one its route names first, never in a workspace the
    /// token is granted.
    pub fn administers(self) -> bool {
        matches!(self.spec().auth, Auth::Bearer(scope) if scope.is_admin())
    }

    /// An admin operation on the instance rather than on one organisation: its route names
    /// none, and only an operator performs it (the default policy's role table).
    pub fn instance_wide(self) -> bool {
        const INSTANCE: [&str; 3] = ["/v1/policies", "/v1/webhook-signing-keys", "/v1/audit/"];
        self.administers()
            && INSTANCE
                .iter()
                .any(|prefix| self.spec().route.starts_with(prefix))
    }

    /// An operator's alone, whatever the active authorizer says: the default policy's
    /// `Operate` rows (the organisations, the instance's policies, keys and purge, and the two
    /// settings that constrain an organisation's own admins). `Services::authorize` refuses
    /// them to anyone else before the policy is asked, so a custom policy may narrow the role
    /// table but never widen it (docs/decisions.md, "The admin plane, part 2").
    pub const fn operators_only(self) -> bool {
        matches!(
            self,
            Operation::CreateOrganisation
                | Operation::ListOrganisations
                | Operation::SetSelfApproval
                | Operation::SetAuditRetention
                | Operation::PurgeAuditLog
                | Operation::InstallPolicy
                | Operation::ListPolicies
                | Operation::GetPolicy
                | Operation::ActivatePolicy
                | Operation::RemovePolicy
                | Operation::RollBackPolicy
                | Operation::SetShadowPolicy
                | Operation::ListShadowDisagreements
                | Operation::ListPolicyDecisions
                | Operation::ListWebhookSigningKeys
        )
    }

    /// The operations the authorizer is asked about: those a bearer token performs.
    pub fn bearer() -> impl Iterator<Item = Operation> {
        Operation::ALL
            .into_iter()
            .filter(|op| matches!(op.spec().auth, Auth::Bearer(_) | Auth::AnyToken))
    }
}

// `spec` indexes the table by the variant: each row must be its own variant's.
const _: () = {
    let mut i = 0;
    while i < OPERATIONS.len() {
        assert!(OPERATIONS[i].operation as usize == i);
        i += 1;
    }
};

/// Where the runner-signed routes live: every `RunnerSigned` row's route starts with it and no
/// other row's does (the test below holds this). A request under it is a runner's before
/// routing, even one that names no route, so a runner's 404 spends the runner budget too.
pub const RUNNER_ROUTES: &str = "/v1/runner/";

/// Whether `path` (as sent) is under [`RUNNER_ROUTES`].
pub fn is_runner_path(path: &str) -> bool {
    path.starts_with(RUNNER_ROUTES)
}

/// A route variable, named as in the document (`{id}`) or as poem's router names it (`:param0`).
pub fn is_variable(segment: &str) -> bool {
    segment.starts_with(':') || (segment.starts_with('{') && segment.ends_with('}'))
}

/// The operation of a document template and method, exactly as given: for reading the
/// document against the table when it is built, never for routing a request.
pub fn operation_by_route(method: &str, template: &str) -> Option<&'static OperationSpec> {
    OPERATIONS
        .iter()
        .find(|op| op.method == method && same_shape(op.route, template))
}

/// Two templates with the same literals in the same places, whatever their variables' names.
fn same_shape(a: &str, b: &str) -> bool {
    let (mut a, mut b) = (a.split('/'), b.split('/'));
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) if x == y || (is_variable(x) && is_variable(y)) => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_routes_with_methods_are_unique() {
        for (i, a) in OPERATIONS.iter().enumerate() {
            for b in &OPERATIONS[i + 1..] {
                assert_ne!(a.id, b.id);
                assert!(
                    a.method != b.method || !same_shape(a.route, b.route),
                    "{} and {} share a route and method",
                    a.id,
                    b.id
                );
            }
        }
    }

    #[test]
    fn runner_signed_routes_and_only_they_live_under_the_runner_prefix() {
        for op in &OPERATIONS {
            assert_eq!(
                op.auth == Auth::RunnerSigned,
                is_runner_path(op.route),
                "{}",
                op.id
            );
        }
    }

    /// The classes the limiter has always used: issuance issues, `GET` reads, the rest write.
    #[test]
    fn rate_classes_follow_the_method_except_issuance() {
        for op in &OPERATIONS {
            let expected = if op.operation == Operation::IssueToken {
                RateClass::Issue
            } else {
                RateClass::of_method(op.method)
            };
            assert_eq!(op.rate, expected, "{}", op.id);
        }
    }

    /// Every change takes a key, and no read does (a `GET` has no body to fingerprint); a read
    /// writes no audit event, a change at least one.
    #[test]
    fn changes_are_idempotent_and_audited_and_reads_are_neither() {
        for op in &OPERATIONS {
            let change = op.method != "GET";
            assert_eq!(op.idempotent, change, "{}", op.id);
            assert_eq!(!op.audit.is_empty(), change, "{}", op.id);
        }
    }

    /// The admin plane's routes are the organisations, or name their organisation first,
    /// which is what its question and the organisation check read; the instance's own
    /// (policies, webhook signing keys, the purge) name none and are an operator's.
    #[test]
    fn admin_operations_act_on_the_organisation_of_their_route() {
        for op in Operation::ALL.into_iter().filter(|op| op.administers()) {
            let route = op.spec().route;
            if op.instance_wide() {
                assert!(!route.starts_with("/v1/organisations"), "{}", op.id());
                continue;
            }
            assert!(route.starts_with("/v1/organisations"), "{}", op.id());
            if route != "/v1/organisations" {
                assert_eq!(op.variables().next(), Some("organisationId"), "{}", op.id());
            }
        }
    }

    /// Every operation of the instance is an operator's alone (the default policy's role table
    /// is held to the whole list in `policy/tests.rs`), and only admin operations are.
    #[test]
    fn operator_only_operations_include_the_instance_and_only_admin_operations() {
        for op in Operation::ALL {
            if op.instance_wide() {
                assert!(op.operators_only(), "{}", op.id());
            }
            if op.operators_only() {
                assert!(op.administers(), "{}", op.id());
            }
        }
    }

    #[test]
    fn a_route_variable_is_found_by_its_position() {
        let revoke = Operation::RevokeToken.spec();
        assert_eq!(revoke.variable_index("workspaceId"), Some(0));
        assert_eq!(revoke.variable_index("tokenId"), Some(1));
        assert_eq!(revoke.variable_index("poolId"), None);
    }

    #[test]
    fn a_template_finds_its_row() {
        let by_route = |method, pattern| operation_by_route(method, pattern).map(|op| op.id);
        assert_eq!(
            by_route("DELETE", "/v1/workspaces/:param0/access-tokens/:param1"),
            Some("revokeWorkspaceAccessToken")
        );
        assert_eq!(
            by_route("POST", "/v1/runner/webhook-deliveries/{deliveryId}/status"),
            Some("reportDeliveryStatus")
        );
        assert_eq!(by_route("PUT", "/v1/personal-access-tokens"), None);
        assert_eq!(
            by_route("PUT", "/v1/marketplace/plugins/:param0/reviews"),
            None
        );
    }
}
