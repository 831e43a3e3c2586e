//! Authorization through the active policy component: hot activation on every replica,
//! rollback, failures contained, shadow evaluation.

use std::time::{Duration, Instant};

use control_plane::policy::{PolicyKind, fixtures};

use crate::helpers::{
    ServerProcess, Tenant, TestApp, assert_api_error, postgres_or_skip, spawn_app_with,
};

const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

async fn status(client: &reqwest::Client, base: &str, tenant: &Tenant) -> u16 {
    client
        .get(format!(
            "{base}/v1/workspaces/{}/activity",
            tenant.workspace_id
        ))
        .bearer_auth(&tenant.token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Waits (at most `limit`) until `base` answers `want`; returns how long it took.
async fn until(
    client: &reqwest::Client,
    base: &str,
    tenant: &Tenant,
    want: u16,
    limit: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        if status(client, base, tenant).await == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{base} did not answer {want} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn keyed_app() -> TestApp {
    spawn_app_with(|c| c.token_hash_key = Some(HASH_KEY.into())).await
}

/// Postgres only: a second server process on the same records store, told of changes by NOTIFY.
#[tokio::test]
async fn postgres_only_an_activation_reaches_another_process_within_a_second_and_rollback_restores()
{
    if !postgres_or_skip(
        "postgres_only_an_activation_reaches_another_process_within_a_second_and_rollback_restores",
    ) {
        return;
    }
    let app = keyed_app().await;
    let tenant = app.bootstrap().await;
    let other = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let client = reqwest::Client::new();
    assert_eq!(status(&client, &other.address, &tenant).await, 200);

    crate::helpers::activate_deny_all(&app.services).await;
    let took = until(
        &client,
        &other.address,
        &tenant,
        403,
        Duration::from_secs(3),
    )
    .await;
    assert!(
        took < Duration::from_secs(1),
        "activation reached the other process in {took:?}"
    );
    until(&client, &app.address, &tenant, 403, Duration::from_secs(1)).await;

    let restored = app
        .services
        .rollback_policy(PolicyKind::Authorizer)
        .await
        .unwrap();
    assert!(restored.is_none(), "back to the built-in default");
    let took = until(
        &client,
        &other.address,
        &tenant,
        200,
        Duration::from_secs(3),
    )
    .await;
    assert!(
        took < Duration::from_secs(1),
        "rollback reached the other process in {took:?}"
    );
}

#[tokio::test]
async fn a_failing_policy_is_a_403_policy_error_and_the_server_keeps_serving() {
    let app = spawn_app_with(|_| {}).await;
    let tenant = app.bootstrap().await;
    let client = reqwest::Client::new();
    for (name, bytes) in [
        ("trap", fixtures::TRAP),
        ("spin", fixtures::SPIN),
        ("bomb", fixtures::BOMB),
    ] {
        let policy = app
            .services
            .install_policy(name, PolicyKind::Authorizer, bytes)
            .await
            .unwrap();
        app.services
            .activate_policy(&format!("{name}@{}", policy.version))
            .await
            .unwrap();
        until(&client, &app.address, &tenant, 403, Duration::from_secs(3)).await;
        let response = app
            .get(
                &format!("/v1/workspaces/{}/activity", tenant.workspace_id),
                &tenant.token,
            )
            .send()
            .await
            .unwrap();
        assert_api_error(response, 403, "policy_error").await;
        assert_eq!(
            app.client
                .get(app.url("/healthz"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        app.services
            .rollback_policy(PolicyKind::Authorizer)
            .await
            .unwrap();
        until(&client, &app.address, &tenant, 200, Duration::from_secs(3)).await;
    }
    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for reason in ["trap", "timeout"] {
        assert!(
            metrics.contains(&format!(
                r#"policy_failures_total{{kind="authorizer",reason="{reason}"}}"#
            )),
            "{reason}: {metrics}"
        );
    }
}

#[tokio::test]
async fn installation_refuses_components_of_the_wrong_world_and_garbage() {
    let app = spawn_app_with(|_| {}).await;
    let wrong = app
        .services
        .install_policy(
            "moderation-as-authz",
            PolicyKind::Authorizer,
            control_plane::policy::defaults::MODERATOR,
        )
        .await
        .unwrap_err();
    assert!(wrong.to_string().contains("does not implement"), "{wrong}");
    let garbage = app
        .services
        .install_policy("garbage", PolicyKind::Authorizer, b"\0asm\x0d\0\x01\0junk")
        .await
        .unwrap_err();
    assert!(garbage.to_string().contains("component"), "{garbage}");
    assert!(
        app.services.list_policies().await.unwrap().0.is_empty(),
        "nothing stored"
    );
}

#[tokio::test]
async fn a_shadow_policy_records_disagreements_without_changing_decisions() {
    let app = spawn_app_with(|_| {}).await;
    let tenant = app.bootstrap().await;
    let client = reqwest::Client::new();
    let deny_all = app
        .services
        .install_policy("deny-all", PolicyKind::Authorizer, fixtures::DENY_ALL)
        .await
        .unwrap();
    app.services
        .shadow_policy(Some(&format!("deny-all@{}", deny_all.version)))
        .await
        .unwrap();
    // Wait until the shadow is loaded: disagreements start to appear.
    let started = Instant::now();
    loop {
        assert_eq!(
            status(&client, &app.address, &tenant).await,
            200,
            "the shadow never decides"
        );
        if !app.services.shadow_report(10).await.unwrap().is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no disagreement recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = app.services.shadow_report(10).await.unwrap();
    assert_eq!(report[0].operation, "listActivity");
    assert_eq!(report[0].active_decision, "allow");
    assert!(report[0].shadow_decision.starts_with("deny"));
}
