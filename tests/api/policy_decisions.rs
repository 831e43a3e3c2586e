//! The policy decision log and the decision metrics: a denied request logged with its
//! correlation id, reason, policy and digest; allows sampled (all at rate 1, none at rate 0,
//! every deny whatever the rate); a moderation logged with its organisation; the metrics on
//! `/metrics` after one decision; the log pruned to its row count and age.

use std::time::{Duration, Instant};

use control_plane::domain::{SampleRate, Scope, Span};
use control_plane::policy::{DecisionOutcome, defaults, digest};
use control_plane::service::DecisionListing;
use control_plane::storage::PolicyDecisionRecord;
use uuid::Uuid;

use serde_json::json;

use crate::reviews::{create_plugin, published_review, user_token};
use crate::support::{Call, Tenant, TestApp, activate_deny_all, routes, spawn_app_with};

fn every(outcome: Option<DecisionOutcome>) -> DecisionListing {
    DecisionListing {
        since: None,
        operation: None,
        outcome,
        limit: 1000,
    }
}

async fn logged(app: &TestApp, outcome: Option<DecisionOutcome>) -> Vec<PolicyDecisionRecord> {
    app.services
        .list_policy_decisions(&every(outcome))
        .await
        .unwrap()
}

/// The log once `done` holds of it (the writer is in the background; at most 10 s).
async fn once(
    app: &TestApp,
    what: &str,
    done: impl Fn(&[PolicyDecisionRecord]) -> bool,
) -> Vec<PolicyDecisionRecord> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = logged(app, None).await;
        if done(&rows) {
            return rows;
        }
        assert!(
            Instant::now() < deadline,
            "never logged: {what}; log: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn with_cid<'a>(rows: &'a [PolicyDecisionRecord], cid: &str) -> Option<&'a PolicyDecisionRecord> {
    rows.iter()
        .find(|r| r.correlation_id.as_deref() == Some(cid))
}

/// The moderator's row of the request `cid` (the authorizer's shares the id).
fn moderation<'a>(rows: &'a [PolicyDecisionRecord], cid: &str) -> Option<&'a PolicyDecisionRecord> {
    rows.iter()
        .find(|r| r.kind == "moderator" && r.correlation_id.as_deref() == Some(cid))
}

/// Sends `request` under a fresh correlation id: (status, id).
async fn with_fresh_cid(request: reqwest::RequestBuilder) -> (u16, String) {
    let cid = format!("decision-{}", Uuid::new_v4().simple());
    let status = request.header("x-correlation-id", &cid).status_code().await;
    (status, cid)
}

/// Reads the tenant's activity with `token` under a fresh correlation id: (status, id).
async fn read_activity(app: &TestApp, tenant: &Tenant, token: &str) -> (u16, String) {
    let url = app.url(&routes::activity(tenant.workspace_id));
    with_fresh_cid(app.client.get(url).bearer_auth(token)).await
}

async fn app_sampling(rate: SampleRate) -> (TestApp, Tenant) {
    let app = spawn_app_with(|c| c.policy_decision_sample = rate).await;
    let tenant = app.bootstrap().await;
    (app, tenant)
}

#[tokio::test]
async fn a_denied_request_is_logged_with_its_correlation_id_reason_policy_and_digest() {
    let (app, tenant) = app_sampling(SampleRate::NONE).await;
    let unscoped = app.scoped_token(&tenant, &[Scope::AuditRead]).await;
    let (status, cid) = read_activity(&app, &tenant, &unscoped).await;
    assert_eq!(status, 403);
    let rows = once(&app, "the deny", |rows| with_cid(rows, &cid).is_some()).await;
    let row = with_cid(&rows, &cid).unwrap();
    assert_eq!(row.kind, "authorizer");
    assert_eq!(row.operation, "listActivity");
    assert_eq!(row.outcome, "deny");
    assert_eq!(row.failure, None);
    assert_eq!(
        row.reason.as_deref(),
        Some("the token lacks the scope activity:read")
    );
    assert_eq!(
        (row.policy_name.as_str(), row.policy_version),
        ("built-in", 0)
    );
    assert_eq!(row.policy_digest, digest(defaults::AUTHORIZER));
    assert_eq!(row.organisation_id, Some(tenant.organisation_id));
    assert_eq!(row.workspace_id, Some(tenant.workspace_id));

    // An installed policy is named by its name and version.
    activate_deny_all(&app.services).await;
    // In force here at once, rather than when the change feed says so.
    app.services.reload_policies().await.unwrap();
    let (status, cid) = read_activity(&app, &tenant, &tenant.token).await;
    assert_eq!(status, 403);
    let rows = once(&app, "the installed policy's deny", |rows| {
        with_cid(rows, &cid).is_some()
    })
    .await;
    let row = with_cid(&rows, &cid).unwrap();
    assert_eq!(
        (row.policy_name.as_str(), row.policy_version),
        ("deny-all", 1)
    );
    assert_eq!(
        row.policy_digest,
        digest(control_plane::policy::fixtures::DENY_ALL)
    );
    // The filters are the store's.
    let denies = logged(&app, Some(DecisionOutcome::Deny)).await;
    assert_eq!(denies.len(), 2, "{denies:?}");
    assert_eq!(denies[0].correlation_id.as_deref(), Some(cid.as_str()));
    assert!(logged(&app, Some(DecisionOutcome::Allow)).await.is_empty());
}

/// A moderation is logged with the organisation whose turn it was: the author's for a review,
/// the reporter's for a report, so an operator can see who a flood of holds or reports came
/// from.
#[tokio::test]
async fn a_moderation_is_logged_with_its_organisation() {
    // Every decision kept: a report that changes nothing is a publish, sampled like an allow.
    let (app, tenant) = app_sampling(SampleRate::ALL).await;
    let plugin = create_plugin(&app, &tenant, "deployer").await;
    let (_, author) = user_token(&app, &tenant, &[Scope::ReviewsWrite]).await;
    let url = app.url(&routes::own_review(plugin));
    let body = json!({"rating": 2, "title": "See", "body": "more at https://example.com"});
    let (status, cid) = with_fresh_cid(app.client.put(url).bearer_auth(&author).json(&body)).await;
    assert_eq!(status, 200);
    let rows = once(&app, "the hold", |rows| moderation(rows, &cid).is_some()).await;
    let row = moderation(&rows, &cid).unwrap();
    assert_eq!(
        (
            row.kind.as_str(),
            row.operation.as_str(),
            row.outcome.as_str()
        ),
        ("moderator", "review", "hold")
    );
    assert_eq!(row.organisation_id, Some(tenant.organisation_id));
    // Reviews belong to no workspace.
    assert_eq!(row.workspace_id, None);

    // A report is the reporter's organisation's decision, not the author's.
    let (_, writer) = user_token(&app, &tenant, &[Scope::ReviewsWrite]).await;
    let review = published_review(&app, &writer, plugin).await;
    let other = app.bootstrap().await;
    let (_, reporter) = user_token(&app, &other, &[Scope::ReviewsReport]).await;
    let url = app.url(&routes::report_review(plugin, review));
    let body = json!({"reason": "spam"});
    let (status, cid) =
        with_fresh_cid(app.client.post(url).bearer_auth(&reporter).json(&body)).await;
    assert_eq!(status, 200);
    let rows = once(&app, "the report", |rows| moderation(rows, &cid).is_some()).await;
    let row = moderation(&rows, &cid).unwrap();
    assert_eq!(row.operation, "report");
    assert_eq!(row.organisation_id, Some(other.organisation_id));
}

#[tokio::test]
async fn at_rate_one_every_allow_is_logged() {
    let (app, tenant) = app_sampling(SampleRate::ALL).await;
    let mut cids = vec![];
    for _ in 0..3 {
        let (status, cid) = read_activity(&app, &tenant, &tenant.token).await;
        assert_eq!(status, 200);
        cids.push(cid);
    }
    let rows = once(&app, "three allows", |rows| {
        cids.iter().all(|c| with_cid(rows, c).is_some())
    })
    .await;
    for cid in &cids {
        let row = with_cid(&rows, cid).unwrap();
        assert_eq!(
            (row.outcome.as_str(), row.reason.as_deref()),
            ("allow", None)
        );
        // Within the suite's 1 s policy deadline: a decision past it would have failed closed.
        assert!(row.latency_us < 1_000_000, "{row:?}");
    }
    // The first ran the policy (the others may be remembered allows): some microseconds, not
    // a zero that a coarser unit or a missing measurement would give.
    let first = with_cid(&rows, &cids[0]).unwrap();
    assert!(first.latency_us > 0, "{first:?}");
}

#[tokio::test]
async fn at_rate_zero_no_allow_is_logged_but_every_deny_is() {
    let (app, tenant) = app_sampling(SampleRate::NONE).await;
    for _ in 0..5 {
        assert_eq!(read_activity(&app, &tenant, &tenant.token).await.0, 200);
    }
    let unscoped = app.scoped_token(&tenant, &[Scope::AuditRead]).await;
    let mut denied = vec![];
    for _ in 0..3 {
        let (status, cid) = read_activity(&app, &tenant, &unscoped).await;
        assert_eq!(status, 403);
        denied.push(cid);
    }
    // The queue is one, in order: once the last deny is written, an allow kept would be too.
    let rows = once(&app, "every deny", |rows| {
        denied.iter().all(|c| with_cid(rows, c).is_some())
    })
    .await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|r| r.outcome == "deny"), "{rows:?}");
}

#[tokio::test]
async fn the_decision_metrics_appear_on_metrics_with_their_labels() {
    let (app, tenant) = app_sampling(SampleRate::NONE).await;
    assert_eq!(read_activity(&app, &tenant, &tenant.token).await.0, 200);
    let metrics = reqwest::get(format!("{}/metrics", app.address))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            r#"policy_decisions_total{kind="authorizer",outcome="allow",policy="built-in"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"policy_decision_seconds_count{kind="authorizer",policy="built-in"} 1"#),
        "{metrics}"
    );
    // The smallest bucket is 10 µs, the largest 100 ms.
    for le in ["0.00001", "0.1", "+Inf"] {
        let bucket = format!(
            r#"policy_decision_seconds_bucket{{kind="authorizer",policy="built-in",le="{le}"}}"#
        );
        assert!(metrics.contains(&bucket), "{bucket} in {metrics}");
    }
    assert!(
        metrics.contains("policy_decisions_dropped_total 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_log_is_pruned_to_its_row_count() {
    let app = spawn_app_with(|c| {
        c.policy_decision_sample = SampleRate::ALL;
        c.policy_decision_max_rows = 3;
    })
    .await;
    let tenant = app.bootstrap().await;
    let mut cids = vec![];
    for _ in 0..8 {
        let (status, cid) = read_activity(&app, &tenant, &tenant.token).await;
        assert_eq!(status, 200);
        cids.push(cid);
    }
    let last = cids.last().unwrap().clone();
    let rows = once(&app, "the last decision, with the log pruned", |rows| {
        with_cid(rows, &last).is_some() && rows.len() <= 3
    })
    .await;
    assert!(with_cid(&rows, &cids[0]).is_none(), "{rows:?}");
}

#[tokio::test]
async fn the_log_is_pruned_to_its_age() {
    let app = spawn_app_with(|c| {
        c.policy_decision_sample = SampleRate::ALL;
        c.policy_decision_max_age = "0s".parse::<Span>().unwrap();
    })
    .await;
    let tenant = app.bootstrap().await;
    assert_eq!(read_activity(&app, &tenant, &tenant.token).await.0, 200);
    // Written (counted), then pruned at once: nothing is younger than no age at all.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = reqwest::get(format!("{}/metrics", app.address))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let written = metrics
            .lines()
            .find_map(|l| l.strip_prefix("policy_decisions_logged_total "))
            .map(|v| v.trim().parse::<u64>().unwrap())
            .expect("policy_decisions_logged_total is published");
        if written >= 1 && logged(&app, None).await.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not written then pruned: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
