//! Authorization through the active policy component: hot activation on every replica,
//! rollback, failures contained, shadow evaluation, and the engine's bounds (a sleeping policy
//! cut at its deadline, a decision slot waited for at most the queue timeout, a full shadow
//! queue dropping evaluations).

use std::time::{Duration, Instant};

use control_plane::policy::{PolicyKind, fixtures};

use crate::support::{
    Call, ServerProcess, Tenant, TestApp, assert_api_error, needs, routes, spawn_app_with,
};

const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

async fn status(client: &reqwest::Client, base: &str, tenant: &Tenant) -> u16 {
    client
        .get(format!("{base}{}", routes::activity(tenant.workspace_id)))
        .bearer_auth(&tenant.token)
        .status_code()
        .await
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
    needs!(Postgres);
    let app = keyed_app().await;
    let tenant = app.bootstrap().await;
    let other = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let client = reqwest::Client::new();
    assert_eq!(status(&client, &other.address, &tenant).await, 200);

    crate::support::activate_deny_all(&app.services).await;
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
        .rollback_policy(
            PolicyKind::Authorizer,
            &crate::support::admin_write(),
            tenant.organisation_id,
        )
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
    let app = spawn_app_with(|c| c.policy_deadline_ms = 50).await;
    let tenant = app.bootstrap().await;
    let client = reqwest::Client::new();
    for (name, bytes) in [
        ("trap", fixtures::TRAP),
        ("spin", fixtures::SPIN),
        ("bomb", fixtures::BOMB),
    ] {
        let policy = app
            .services
            .install_policy(
                name,
                PolicyKind::Authorizer,
                bytes,
                &crate::support::admin_write(),
                tenant.organisation_id,
            )
            .await
            .unwrap();
        // Over its measured budgets, by design: forced.
        app.services
            .activate_policy_with(
                &format!("{name}@{}", policy.version),
                true,
                &crate::support::admin_write(),
                tenant.organisation_id,
            )
            .await
            .unwrap();
        until(&client, &app.address, &tenant, 403, Duration::from_secs(3)).await;
        app.get(&routes::activity(tenant.workspace_id), &tenant.token)
            .expect(403, "policy_error")
            .await;
        assert_eq!(
            app.client
                .get(app.url("/healthz"))
                .response()
                .await
                .status(),
            200
        );
        app.services
            .rollback_policy(
                PolicyKind::Authorizer,
                &crate::support::admin_write(),
                tenant.organisation_id,
            )
            .await
            .unwrap();
        until(&client, &app.address, &tenant, 200, Duration::from_secs(3)).await;
    }
    let metrics = app.metrics().await;
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
    let tenant = app.bootstrap().await;
    let wrong = app
        .services
        .install_policy(
            "moderation-as-authz",
            PolicyKind::Authorizer,
            control_plane::policy::defaults::MODERATOR,
            &crate::support::admin_write(),
            tenant.organisation_id,
        )
        .await
        .unwrap_err();
    assert!(wrong.to_string().contains("does not implement"), "{wrong}");
    let garbage = app
        .services
        .install_policy(
            "garbage",
            PolicyKind::Authorizer,
            b"\0asm\x0d\0\x01\0junk",
            &crate::support::admin_write(),
            tenant.organisation_id,
        )
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
        .install_policy(
            "deny-all",
            PolicyKind::Authorizer,
            fixtures::DENY_ALL,
            &crate::support::admin_write(),
            tenant.organisation_id,
        )
        .await
        .unwrap();
    app.services
        .shadow_policy(
            Some(&format!("deny-all@{}", deny_all.version)),
            &crate::support::admin_write(),
            tenant.organisation_id,
        )
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

/// Installs `bytes` as an authorizer and activates it, then waits until `app` answers with it.
async fn activate(app: &TestApp, tenant: &Tenant, name: &str, bytes: &[u8], limit: Duration) {
    let policy = app
        .services
        .install_policy(
            name,
            PolicyKind::Authorizer,
            bytes,
            &crate::support::admin_write(),
            tenant.organisation_id,
        )
        .await
        .unwrap();
    // Hostile policies are over their measured budgets: forced.
    app.services
        .activate_policy_with(
            &format!("{name}@{}", policy.version),
            true,
            &crate::support::admin_write(),
            tenant.organisation_id,
        )
        .await
        .unwrap();
    until(&reqwest::Client::new(), &app.address, tenant, 403, limit).await;
}

/// The value of an unlabelled counter in the Prometheus text.
fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} is not on /metrics: {metrics}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_sleeping_policy_is_stopped_at_its_deadline_like_a_spinning_one() {
    // The hostile policy sleeps 30 s in a WASI clock wait: a blocking host call, which the
    // epoch deadline alone would not interrupt. The deadline is the default, 50 ms.
    let app = spawn_app_with(|c| c.policy_deadline_ms = 50).await;
    let tenant = app.bootstrap().await;
    activate(
        &app,
        &tenant,
        "sleep",
        fixtures::SLEEP,
        Duration::from_secs(5),
    )
    .await;
    let started = Instant::now();
    app.get(&routes::activity(tenant.workspace_id), &tenant.token)
        .expect(403, "policy_error")
        .await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "answered near the 50 ms deadline, not after the 30 s sleep: {took:?}"
    );
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(r#"policy_failures_total{kind="authorizer",reason="timeout"}"#),
        "{metrics}"
    );
    app.services
        .rollback_policy(
            PolicyKind::Authorizer,
            &crate::support::admin_write(),
            tenant.organisation_id,
        )
        .await
        .unwrap();
    until(
        &app.client,
        &app.address,
        &tenant,
        200,
        Duration::from_secs(3),
    )
    .await;
}

#[tokio::test]
async fn a_decision_with_no_free_slot_is_a_503_with_retry_after_not_a_hang() {
    // One slot, held for a whole 1.5 s deadline by the sleeping policy; a second request waits
    // 50 ms for it and is refused.
    let app = spawn_app_with(|c| {
        c.policy_concurrency = Some(1);
        c.policy_deadline_ms = 1500;
        c.policy_queue_timeout_ms = Some(50);
    })
    .await;
    let tenant = app.bootstrap().await;
    activate(
        &app,
        &tenant,
        "sleep",
        fixtures::SLEEP,
        Duration::from_secs(10),
    )
    .await;
    let path = routes::activity(tenant.workspace_id);
    let holder = {
        let request = app.get(&path, &tenant.token);
        tokio::spawn(async move { request.response().await })
    };
    // Let the first request take the slot.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let refused = app.get(&path, &tenant.token).response().await;
    let took = started.elapsed();
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1"),
        "retry-after on the 503"
    );
    assert_api_error(refused, 503, "unavailable").await;
    assert!(
        took < Duration::from_secs(1),
        "refused after the 50 ms queue timeout, before the slot came free: {took:?}"
    );
    assert_api_error(holder.await.unwrap(), 403, "policy_error").await;
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(r#"policy_failures_total{kind="authorizer",reason="unavailable"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_freed_slot_goes_to_another_organisation_before_a_floods_backlog() {
    // One slot; every decision sleeps to its 1 s deadline and waits at most 1.2 s for the slot.
    // One organisation holds it and queues two more; another queues one after them. When the
    // slot frees at 1 s, first come first served would give it to the flood, and the other
    // organisation's request would time out at 1.8 s; in turns, it is decided (and fails
    // closed, 403, as every decision of this policy does) while the flood's backlog times out.
    let app = spawn_app_with(|c| {
        c.policy_concurrency = Some(1);
        c.policy_deadline_ms = 1000;
        c.policy_queue_timeout_ms = Some(1200);
    })
    .await;
    let flood = app.bootstrap().await;
    let other = app.bootstrap().await;
    activate(
        &app,
        &flood,
        "sleep",
        fixtures::SLEEP,
        Duration::from_secs(10),
    )
    .await;
    let send = |tenant: &Tenant| {
        let request = app.get(&routes::activity(tenant.workspace_id), &tenant.token);
        tokio::spawn(async move { request.response().await })
    };
    // In this order: the holder in the slot, then the backlog queued, then the newcomer (no
    // metric shows the queue; a slow start can only fail the test, never pass it wrongly).
    let holder = send(&flood);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let backlog = [send(&flood), send(&flood)];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let newcomer = send(&other);
    assert_api_error(newcomer.await.unwrap(), 403, "policy_error").await;
    assert_api_error(holder.await.unwrap(), 403, "policy_error").await;
    for queued in backlog {
        assert_api_error(queued.await.unwrap(), 503, "unavailable").await;
    }
}

#[tokio::test]
async fn a_full_shadow_queue_drops_evaluations_without_delaying_active_decisions() {
    // The active authorizer is an installed one (deny-all), so each decision needs one of the
    // two slots. Every shadow evaluation sleeps to its 3 s deadline. Were shadows to take slots,
    // they would hold both and the active decisions would wait; instead two shadow workers and a
    // queue of one take three of the 20 requests' evaluations, the rest are dropped and counted,
    // and every request is answered before a single shadow evaluation could end.
    let app = spawn_app_with(|c| {
        c.policy_concurrency = Some(2);
        c.policy_deadline_ms = 3000;
        c.policy_shadow_queue = 1;
    })
    .await;
    let tenant = app.bootstrap().await;
    let before = counter(&app.metrics().await, "policy_shadow_dropped_total");
    assert_eq!(before, 0.0);
    for (name, bytes) in [("deny-all", fixtures::DENY_ALL), ("sleep", fixtures::SLEEP)] {
        app.services
            .install_policy(
                name,
                PolicyKind::Authorizer,
                bytes,
                &crate::support::admin_write(),
                tenant.organisation_id,
            )
            .await
            .unwrap();
    }
    // Forced: its p99 measured under the suite's load is not this test's subject.
    app.services
        .activate_policy_with(
            "deny-all@1",
            true,
            &crate::support::admin_write(),
            tenant.organisation_id,
        )
        .await
        .unwrap();
    app.services
        .shadow_policy(
            Some("sleep@1"),
            &crate::support::admin_write(),
            tenant.organisation_id,
        )
        .await
        .unwrap();
    // In force now, not at the next poll of the policy watcher.
    app.services.reload_policies().await.unwrap();

    let path = routes::activity(tenant.workspace_id);
    let started = Instant::now();
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let request = app.get(&path, &tenant.token);
            tokio::spawn(async move { request.response().await })
        })
        .collect();
    for request in requests {
        // deny-all's own denial: the active policy decided; the shadow changed nothing.
        assert_api_error(request.await.unwrap(), 403, "forbidden").await;
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "20 requests answered before one shadow evaluation could end: {took:?}"
    );
    let dropped = counter(&app.metrics().await, "policy_shadow_dropped_total");
    assert!(
        dropped >= 17.0,
        "at most 2 evaluating and 1 queued, the rest dropped: {dropped}"
    );
}
