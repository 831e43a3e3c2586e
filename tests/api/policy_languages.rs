//! Policies written in Python and JavaScript (`policies/examples/`), installed and activated
//! as an operator would, deciding real requests: each example authorizer allows and denies,
//! each example moderator publishes and rejects. Hostile Python authorizers (a loop, a sleep,
//! an allocation without bound) are stopped at their budget. The components are built by
//! `policies/examples/build.sh DIR`; this suite reads them from `CP_TEST_POLICY_EXAMPLES=DIR`
//! and skips without it (fails under `CP_TEST_REQUIRE_SERVICES=1`).

use std::path::PathBuf;

use control_plane::policy::PolicyKind;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::reviews::{create_plugin, put_review};
use crate::services;
use crate::support::{Call, TestApp, routes, spawn_app};

const EXAMPLES_VAR: &str = "CP_TEST_POLICY_EXAMPLES";

/// The folder of built examples, or `None` (after the skip line) when this run has none.
fn examples(test: &str) -> Option<PathBuf> {
    match std::env::var_os(EXAMPLES_VAR) {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => {
            services::missing(&format!("{EXAMPLES_VAR} is not set"));
            services::skip(
                test,
                &format!("{EXAMPLES_VAR}=DIR (built by policies/examples/build.sh DIR)"),
            );
            None
        }
    }
}

fn component(dir: &std::path::Path, file: &str) -> Vec<u8> {
    let path = dir.join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Installs and activates `bytes` as the operator's `cpctl policies install/activate` would
/// (`--force` when `force`), then loads it into this process and checks that it is the one in
/// force.
async fn activate(app: &TestApp, name: &str, kind: PolicyKind, bytes: &[u8], force: bool) {
    let log = crate::support::policy_log(&app.services).await;
    let policy = app
        .services
        .install_policy(name, kind, bytes, &crate::support::admin_write(), log)
        .await
        .unwrap_or_else(|e| panic!("{name} installs: {e}"));
    app.services
        .activate_policy_with(
            &format!("{name}@{}", policy.version),
            force,
            &crate::support::admin_write(),
            log,
        )
        .await
        .unwrap();
    app.services.reload_policies().await.unwrap();
    let (authorizer, moderator, _) = app.services.policy_runtime().unwrap().active_digests();
    let active = match kind {
        PolicyKind::Authorizer => authorizer,
        PolicyKind::Moderator => moderator,
    };
    assert_eq!(active, policy.digest, "{name} is the active {kind:?}");
}

#[tokio::test]
async fn python_and_js_authorizers_allow_and_deny_over_http() {
    let Some(dir) = examples(services::test_name!()) else {
        return;
    };
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    for lang in ["python", "js"] {
        let name = format!("{lang}-authorizer");
        let bytes = component(&dir, &format!("{name}.wasm"));
        activate(&app, &name, PolicyKind::Authorizer, &bytes, false).await;

        let own = tenant.workspace_id.to_string();
        for workspace in [own.clone(), own.to_uppercase()] {
            // Upper case names the same workspace: the policy compares canonical ids.
            app.get(&routes::activity(workspace), &tenant.token)
                .ok_response()
                .await;
        }

        let other = routes::activity(Uuid::new_v4());
        let denied = app
            .get(&other, &tenant.token)
            .expect(403, "forbidden")
            .await;
        assert_eq!(
            denied["error"]["message"], "the token has no access to this workspace",
            "{lang}: the policy's own reason, not a failure: {denied}"
        );
    }
}

#[tokio::test]
async fn python_and_js_moderators_publish_hold_and_reject_over_http() {
    let Some(dir) = examples(services::test_name!()) else {
        return;
    };
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    for lang in ["python", "js"] {
        let name = format!("{lang}-moderator");
        let bytes = component(&dir, &format!("{name}.wasm"));
        activate(&app, &name, PolicyKind::Moderator, &bytes, false).await;
        let plugin = create_plugin(&app, &tenant, &format!("{lang}-plugin")).await;
        for (title, body, status, reason) in [
            ("Solid plugin", "Does what it says.", "published", None),
            (
                "See",
                "more at https://example.com",
                "held",
                Some("contains a link"),
            ),
            (
                "Buy",
                "https://a.example and www.b.example",
                "rejected",
                Some("contains several links"),
            ),
        ] {
            // The same author each time: each PUT replaces the review and is moderated afresh.
            let response = put_review(
                &app,
                &tenant.token,
                plugin,
                &json!({"rating": 4, "title": title, "body": body}),
            )
            .await;
            let v: Value = response.ok().await;
            assert_eq!(v["review"]["status"], status, "{lang}, {body}: {v}");
            let reasons = &v["review"]["moderation"]["reasons"];
            match reason {
                Some(reason) => assert_eq!(reasons, &json!([reason]), "{lang}: {v}"),
                None => assert_eq!(reasons, &json!([]), "{lang}: {v}"),
            }
        }
    }
}

#[tokio::test]
async fn hostile_python_authorizers_are_stopped_at_their_budget() {
    let Some(dir) = examples(services::test_name!()) else {
        return;
    };
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let path = routes::activity(tenant.workspace_id);
    let metrics = app.metrics().await;
    let mut before: std::collections::HashMap<&str, f64> = ["timeout", "memory"]
        .into_iter()
        .map(|r| (r, failures(&metrics, r)))
        .collect();
    for (hostile, reason) in [
        ("spin", "timeout"),
        ("sleep", "timeout"),
        ("bomb", "memory"),
    ] {
        let name = format!("python-hostile-{hostile}");
        let bytes = component(&dir, &format!("{name}.wasm"));
        // Its measurement at install already refuses it; forced, the server stops it.
        activate(&app, &name, PolicyKind::Authorizer, &bytes, true).await;
        app.get(&path, &tenant.token)
            .expect(403, "policy_error")
            .await;
        let after = failures(&app.metrics().await, reason);
        assert_eq!(after, before[reason] + 1.0, "{hostile} failed by {reason}");
        before.insert(reason, after);
        // The server keeps serving once the policy is rolled back.
        app.services
            .rollback_policy(
                PolicyKind::Authorizer,
                &crate::support::admin_write(),
                tenant.organisation_id,
            )
            .await
            .unwrap();
        app.services.reload_policies().await.unwrap();
        app.get(&path, &tenant.token).ok_response().await;
    }
}

/// The authorizer failures of `reason` counted on /metrics (0 before the first).
fn failures(metrics: &str, reason: &str) -> f64 {
    let series = format!(r#"policy_failures_total{{kind="authorizer",reason="{reason}"}} "#);
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}
