//! The v1 operations, in one table: each operation's id, method, route, how its caller is
//! authenticated (and the scope a bearer token needs), and the rate class it spends.
//!
//! It lives in `domain` because both sides read it and `domain` depends on neither: the
//! service asks the policy about an operation by its id, method, route and scope
//! (`service::Operation`, the bearer rows, names one row each), and the HTTP adapter finds
//! a request's row before routing (its rate class, whether it is a runner's, the label of its
//! metrics, the `Allow` header of a 405) and after it (by poem's matched pattern). The routes
//! themselves are still declared by the `#[oai(...)]` attributes of `http/api`, because
//! poem-openapi reads only literals there; a test in `http/docs.rs` holds this table and the
//! generated document to the same operations, so neither can change alone.

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
    /// A runner's signature over the request (the `x-sandbox-*` headers), never a token.
    RunnerSigned,
    /// Nobody: no v1 operation is open today; the variant keeps the table able to say so.
    None,
}

/// One v1 operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationSpec {
    /// The OpenAPI `operationId`, also the `operation` label of the metrics.
    pub id: &'static str,
    /// Upper case, as on the wire.
    pub method: &'static str,
    /// The document's template: `/v1/...` with `{name}` variables.
    pub route: &'static str,
    pub auth: Auth,
    pub rate: RateClass,
}

impl OperationSpec {
    /// The scope a bearer token needs; `None` for an operation not authenticated by a token.
    pub const fn scope(&self) -> Option<Scope> {
        match self.auth {
            Auth::Bearer(scope) => Some(scope),
            Auth::RunnerSigned | Auth::None => None,
        }
    }
}

const fn bearer(
    id: &'static str,
    method: &'static str,
    route: &'static str,
    scope: Scope,
    rate: RateClass,
) -> OperationSpec {
    OperationSpec {
        id,
        method,
        route,
        auth: Auth::Bearer(scope),
        rate,
    }
}

pub const ISSUE_TOKEN: OperationSpec = bearer(
    "issuePersonalAccessToken",
    "POST",
    "/v1/personal-access-tokens",
    Scope::TokensIssue,
    RateClass::Issue,
);
pub const REVOKE_TOKEN: OperationSpec = bearer(
    "revokeWorkspaceAccessToken",
    "DELETE",
    "/v1/workspaces/{workspaceId}/access-tokens/{tokenId}",
    Scope::TokensRevoke,
    RateClass::Write,
);
pub const DELETE_RUNNER_POOL: OperationSpec = bearer(
    "deleteRunnerPool",
    "DELETE",
    "/v1/workspaces/{workspaceId}/runner-pools/{poolId}",
    Scope::RunnerPoolsDelete,
    RateClass::Write,
);
pub const SUBMIT_RUNNER_COMMAND: OperationSpec = bearer(
    "submitRunnerCommand",
    "POST",
    "/v1/workspaces/{workspaceId}/runner-commands",
    Scope::RunnerCommandsSubmit,
    RateClass::Write,
);
pub const STREAM_AUDIT_EVENTS: OperationSpec = bearer(
    "streamAuditEvents",
    "GET",
    "/v1/workspaces/{workspaceId}/audit/stream",
    Scope::AuditRead,
    RateClass::Read,
);
pub const LIST_ACTIVITY: OperationSpec = bearer(
    "listActivity",
    "GET",
    "/v1/workspaces/{workspaceId}/activity",
    Scope::ActivityRead,
    RateClass::Read,
);
pub const REPORT_DELIVERY_STATUS: OperationSpec = OperationSpec {
    id: "reportDeliveryStatus",
    method: "POST",
    route: "/v1/runner/webhook-deliveries/{deliveryId}/status",
    auth: Auth::RunnerSigned,
    rate: RateClass::Write,
};
pub const REQUEST_WORKFLOW_APPROVAL: OperationSpec = bearer(
    "requestWorkflowRevisionApproval",
    "POST",
    "/v1/workspaces/{workspaceId}/workflows/{workflowId}/revisions/{revisionId}/request-approval",
    Scope::WorkflowsRequestApproval,
    RateClass::Write,
);
pub const REPORT_REVIEW: OperationSpec = bearer(
    "reportPluginReview",
    "POST",
    "/v1/marketplace/plugins/{pluginId}/reviews/{reviewId}/report",
    Scope::ReviewsReport,
    RateClass::Write,
);
pub const WRITE_REVIEW: OperationSpec = bearer(
    "putOwnPluginReview",
    "PUT",
    "/v1/marketplace/plugins/{pluginId}/reviews/me",
    Scope::ReviewsWrite,
    RateClass::Write,
);

/// Every v1 operation, in the order of docs/contract.md ("Operations at a glance").
pub static OPERATIONS: [OperationSpec; 10] = [
    ISSUE_TOKEN,
    REVOKE_TOKEN,
    DELETE_RUNNER_POOL,
    SUBMIT_RUNNER_COMMAND,
    STREAM_AUDIT_EVENTS,
    LIST_ACTIVITY,
    REPORT_DELIVERY_STATUS,
    REQUEST_WORKFLOW_APPROVAL,
    REPORT_REVIEW,
    WRITE_REVIEW,
];

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

/// How many literal segments `route` has where `path`, as sent, matches it (a variable matches
/// any non-empty segment); `None` when it does not match.
fn literal_match(route: &str, path: &str) -> Option<usize> {
    let mut literals = 0;
    let mut given = path.split('/');
    for segment in route.split('/') {
        let value = given.next()?;
        if is_variable(segment) {
            if value.is_empty() {
                return None;
            }
        } else if segment == value {
            literals += 1;
        } else {
            return None;
        }
    }
    given.next().is_none().then_some(literals)
}

/// The route `path` (as sent, without the query) matches, as the router picks it: the one
/// with the most literal segments. Its operations, in table order; none when no route matches.
fn on_route(path: &str) -> impl Iterator<Item = &'static OperationSpec> {
    let route = OPERATIONS
        .iter()
        .filter_map(|op| Some((literal_match(op.route, path)?, op.route)))
        .max_by_key(|(literals, _)| *literals)
        .map(|(_, route)| route);
    // No allocation: this runs for every /v1 request, before the limiter.
    OPERATIONS.iter().filter(move |op| Some(op.route) == route)
}

/// The operation a request names before routing: `method` on the route `path` matches (`HEAD`
/// as its `GET`, as the router answers it). `None` for a 404 or a 405.
pub fn find(method: &str, path: &str) -> Option<&'static OperationSpec> {
    let method = if method == "HEAD" { "GET" } else { method };
    on_route(path).find(|op| op.method == method)
}

/// The operation of the route poem matched, by its pattern (`/v1/a/:param0`; a document
/// template matches too) and the request's method, exactly as given.
pub fn operation_by_route(method: &str, pattern: &str) -> Option<&'static OperationSpec> {
    OPERATIONS
        .iter()
        .find(|op| op.method == method && same_shape(op.route, pattern))
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
            let expected = if op.id == ISSUE_TOKEN.id {
                RateClass::Issue
            } else {
                RateClass::of_method(op.method)
            };
            assert_eq!(op.rate, expected, "{}", op.id);
        }
    }

    #[test]
    fn a_path_finds_its_operation_before_routing() {
        let find_id = |method, path| find(method, path).map(|op| op.id);
        assert_eq!(
            find_id("POST", "/v1/personal-access-tokens"),
            Some("issuePersonalAccessToken")
        );
        assert_eq!(
            find_id("HEAD", "/v1/workspaces/w1/activity"),
            Some("listActivity")
        );
        assert_eq!(
            find_id("PUT", "/v1/marketplace/plugins/p1/reviews/me"),
            Some("putOwnPluginReview")
        );
        assert_eq!(
            find_id("POST", "/v1/runner/webhook-deliveries/d1/status"),
            Some("reportDeliveryStatus")
        );
        // A 405, an empty variable, a trailing slash, an unknown path.
        assert_eq!(find_id("PATCH", "/v1/personal-access-tokens"), None);
        assert_eq!(find_id("GET", "/v1/workspaces//activity"), None);
        assert_eq!(find_id("POST", "/v1/personal-access-tokens/"), None);
        assert_eq!(find_id("GET", "/v1/nothing"), None);
    }

    #[test]
    fn a_route_is_found_by_poems_pattern() {
        let by_route = |method, pattern| operation_by_route(method, pattern).map(|op| op.id);
        assert_eq!(
            by_route("DELETE", "/v1/workspaces/:param0/access-tokens/:param1"),
            Some("revokeWorkspaceAccessToken")
        );
        assert_eq!(
            by_route("POST", "/v1/runner/webhook-deliveries/:param0/status"),
            Some("reportDeliveryStatus")
        );
        assert_eq!(by_route("PUT", "/v1/personal-access-tokens"), None);
        assert_eq!(
            by_route("PUT", "/v1/marketplace/plugins/:param0/reviews"),
            None
        );
    }
}
