//! `cpctl policies test`: a file of inputs and expected decisions, evaluated against a component.
//!
//! ```json
//! [{ "name": "readers may list activity",
//!    "request": { "principal": { "id": "…", "userId": "…", "organisationId": "…",
//!                                "workspaceIds": ["…"], "environmentIds": [], "scopes": ["activity:read"] },
//!                 "operation": "listActivity", "method": "GET",
//!                 "route": "/v1/workspaces/{workspaceId}/activity", "workspaceId": "…" },
//!    "expect": "allow" }]
//! ```
//! Authorizer expectations: `allow`, `deny` (403) or `deny:not-found`. Moderator requests are
//! `{ "review": {…}, "report": {…}?, "priorReports": […], "blocklist": […] }` and expectations
//! `publish`, `hold`, `reject` or `hide`.

use serde::Deserialize;

use super::budget::PeakMemory;
use super::engine::{CompiledPolicy, PolicyEngine, PolicyKind};
use super::moderation::outcome;
use super::wit::{authz_types as a, moderation_types as m};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    name: String,
    request: serde_json::Value,
    expect: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PrincipalJson {
    #[serde(default)]
    kind: Option<String>,
    id: String,
    #[serde(default)]
    user_id: String,
    organisation_id: String,
    #[serde(default)]
    workspace_ids: Vec<String>,
    #[serde(default)]
    environment_ids: Vec<String>,
    #[serde(default)]
    scopes: Vec<String>,
    /// `member` (the default), `admin` or `operator`.
    #[serde(default)]
    role: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AuthzJson {
    principal: PrincipalJson,
    operation: String,
    #[serde(default)]
    method: String,
    #[serde(default)]
    route: String,
    #[serde(default)]
    workspace_id: Option<String>,
    #[serde(default)]
    resource_ids: Vec<(String, String)>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReviewJson {
    #[serde(default)]
    id: String,
    #[serde(default)]
    plugin_id: String,
    #[serde(default)]
    author_id: String,
    rating: u8,
    title: String,
    body: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReportJson {
    reporter_id: String,
    reason: String,
    #[serde(default)]
    comment: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ModerationJson {
    review: ReviewJson,
    #[serde(default)]
    report: Option<ReportJson>,
    #[serde(default)]
    prior_reports: Vec<ReportJson>,
    #[serde(default)]
    blocklist: Vec<String>,
}

fn report(r: ReportJson) -> m::Report {
    m::Report {
        reporter_id: r.reporter_id,
        reason: match r.reason.as_str() {
            "spam" => m::ReportReason::Spam,
            "abuse" => m::ReportReason::Abuse,
            "off_topic" | "off-topic" => m::ReportReason::OffTopic,
            _ => m::ReportReason::Other,
        },
        comment: r.comment,
    }
}

/// The outcome of one case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: String,
    /// What the case asks about: the operation id for an authorizer; for a moderator
    /// `written` (no report) or `reported`.
    pub subject: String,
    pub expected: String,
    pub actual: String,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.expected == self.actual
    }
}

/// One request of a cases file, ready for the component.
pub(super) enum Request {
    Authz(a::AuthzRequest),
    Moderation(m::ModerationRequest),
}

/// A case parsed: its name, expectation and request.
pub(super) struct ParsedCase {
    pub(super) name: String,
    pub(super) expect: String,
    pub(super) request: Request,
}

impl ParsedCase {
    fn subject(&self) -> String {
        match &self.request {
            Request::Authz(r) => r.operation.clone(),
            Request::Moderation(r) if r.report.is_some() => "reported".into(),
            Request::Moderation(_) => "written".into(),
        }
    }
}

/// Parses a cases file for a component of `kind`; the error names the case at fault.
pub(super) fn parse_cases(kind: PolicyKind, cases: &str) -> Result<Vec<ParsedCase>, String> {
    let cases: Vec<Case> =
        serde_json::from_str(cases).map_err(|e| format!("the cases file is not valid: {e}"))?;
    cases
        .into_iter()
        .map(|case| {
            let request = match kind {
                PolicyKind::Authorizer => {
                    let r: AuthzJson = serde_json::from_value(case.request)
                        .map_err(|e| format!("case {:?}: invalid request: {e}", case.name))?;
                    Request::Authz(a::AuthzRequest {
                        principal: a::Principal {
                            kind: if r.principal.kind.as_deref() == Some("runner") {
                                a::PrincipalKind::Runner
                            } else {
                                a::PrincipalKind::UserToken
                            },
                            id: r.principal.id,
                            user_id: r.principal.user_id,
                            organisation_id: r.principal.organisation_id,
                            workspace_ids: r.principal.workspace_ids,
                            environment_ids: r.principal.environment_ids,
                            scopes: r.principal.scopes,
                            role: match r.principal.role.as_deref() {
                                None | Some("member") => a::Role::Member,
                                Some("admin") => a::Role::Admin,
                                Some("operator") => a::Role::Operator,
                                Some(other) => {
                                    return Err(format!(
                                        "case {:?}: unknown role {other:?} (member, admin or operator)",
                                        case.name
                                    ));
                                }
                            },
                        },
                        operation: r.operation,
                        method: r.method,
                        route: r.route,
                        workspace_id: r.workspace_id,
                        resource_ids: r.resource_ids,
                    })
                }
                PolicyKind::Moderator => {
                    let r: ModerationJson = serde_json::from_value(case.request)
                        .map_err(|e| format!("case {:?}: invalid request: {e}", case.name))?;
                    Request::Moderation(m::ModerationRequest {
                        review: m::Review {
                            id: r.review.id,
                            plugin_id: r.review.plugin_id,
                            author_id: r.review.author_id,
                            rating: r.review.rating,
                            title: r.review.title,
                            body: r.review.body,
                        },
                        report: r.report.map(report),
                        prior_reports: r.prior_reports.into_iter().map(report).collect(),
                        blocklist: r.blocklist,
                    })
                }
            };
            Ok(ParsedCase {
                name: case.name,
                expect: case.expect,
                request,
            })
        })
        .collect()
}

/// Asks the component one request in a fresh instance, as the server does, and names the
/// answer as case files write it.
pub(super) async fn decide(
    engine: &PolicyEngine,
    policy: &CompiledPolicy,
    request: &Request,
    peak: Option<&PeakMemory>,
) -> String {
    match request {
        Request::Authz(request) => match engine.authorize_with(policy, request, peak).await {
            Ok(a::AuthzDecision::Allow) => "allow".to_owned(),
            Ok(a::AuthzDecision::Deny(d)) if d.status == a::DenyStatus::NotFound => {
                "deny:not-found".to_owned()
            }
            Ok(a::AuthzDecision::Deny(_)) => "deny".to_owned(),
            Err(e) => format!("error: {e}"),
        },
        Request::Moderation(request) => match engine.moderate_with(policy, request, peak).await {
            // "published" -> "publish", as authors write them.
            Ok(decision) => match outcome(decision).verdict.as_str() {
                "published" => "publish",
                "held" => "hold",
                "rejected" => "reject",
                _ => "hide",
            }
            .to_owned(),
            Err(e) => format!("error: {e}"),
        },
    }
}

/// Evaluates every case, one at a time within the deadline; an error means the file or the
/// component is unusable.
pub async fn run_cases(
    engine: &PolicyEngine,
    kind: PolicyKind,
    component: &[u8],
    cases: &str,
) -> Result<Vec<CaseResult>, String> {
    let policy = engine.compile(kind, component)?;
    let cases = parse_cases(kind, cases)?;
    let mut results = Vec::with_capacity(cases.len());
    for case in &cases {
        results.push(CaseResult {
            subject: case.subject(),
            actual: decide(engine, &policy, &case.request, None).await,
            name: case.name.clone(),
            expected: case.expect.clone(),
        });
    }
    Ok(results)
}
