//! Warm policy instances over HTTP: an authorizer that remembers every organisation it sees
//! in a global and denies at the second, installed `per-organisation`, answers every request of
//! three tenants sent at once, round after round, from warm instances (the metrics say so); and
//! the same component installed `fresh` answers them too.

use control_plane::policy::fixtures;
use futures_util::future::join_all;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::loopback::until;
use crate::support::{Call, Tenant, TestApp, routes, tenant_app};

fn upload(app: &TestApp, token: &str, query: &str, bytes: &[u8]) -> reqwest::RequestBuilder {
    app.request(Method::POST, &format!("{}?{query}", routes::POLICIES))
        .bearer_auth(token)
        .header("content-type", "application/wasm")
        .body(bytes.to_vec())
}

/// `name@1` of the remember-orgs fixture, installed with `instances` and in force.
async fn in_force(app: &TestApp, operator: &Tenant, name: &str, instances: &str) {
    let query = format!("kind=authorizer&name={name}&instances={instances}");
    let installed: Value = upload(app, &operator.token, &query, fixtures::REMEMBER_ORGS)
        .ok()
        .await;
    assert_eq!(installed["policy"]["instances"], instances, "{installed}");
    let _: Value = app
        .post_ok(
            &routes::activate_policy(name, 1),
            &operator.token,
            &json!({ "force": true }),
        )
        .await;
    // The witness: a decision counted under this version's name.
    let counted = format!("policy=\"{name}\"");
    until("the version decides", async || {
        app.activity(operator, "?limit=1").await;
        app.metrics().await.contains(&counted)
    })
    .await;
}

/// Every tenant reads its activity at once, `rounds` times: each answer must be a 200.
async fn all_answered(app: &TestApp, tenants: &[Tenant], rounds: usize) {
    for round in 0..rounds {
        let statuses = join_all(tenants.iter().map(|t| {
            app.get(
                &format!("/v1/workspaces/{}/activity?limit=1", t.workspace_id),
                &t.token,
            )
            .status_code()
        }))
        .await;
        assert!(
            statuses.iter().all(|s| *s == 200),
            "round {round}: {statuses:?}"
        );
    }
}

fn metric(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn per_organisation_instances_never_serve_two_tenants() {
    let (app, operator) = tenant_app().await;
    let tenants = [
        operator.clone(),
        app.bootstrap().await,
        app.bootstrap().await,
    ];
    in_force(&app, &operator, "remember", "per-organisation").await;

    all_answered(&app, &tenants, 20).await;
    let metrics = app.metrics().await;
    assert!(
        metric(&metrics, "policy_warm_decisions_total{instance=\"reused\"}") >= 30.0,
        "decided in warm instances: {}",
        metrics
            .lines()
            .filter(|l| l.starts_with("policy_warm"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        metric(&metrics, "policy_failures_total{kind=\"authorizer\""),
        0.0
    );

    // The same component in fresh instances: a new version, the warm ones retired.
    in_force(&app, &operator, "remember-fresh", "fresh").await;
    all_answered(&app, &tenants, 5).await;
    let metrics = app.metrics().await;
    assert_eq!(metric(&metrics, "policy_warm_instances"), 0.0, "retired");
}
