//! A records store that goes away yields 503 with an ApiError, never a hang, and recovers.

use std::time::Duration;

use crate::helpers::{
    Proxy, assert_api_error, create_database, issuance_body, postgres_or_skip, spawn_app_with,
    spawn_with_config,
};

/// Postgres only: the outage is a proxy in front of the Postgres server, cut and restored.
#[tokio::test]
async fn postgres_only_down_is_503_and_recovery_needs_no_restart() {
    if !postgres_or_skip("postgres_only_down_is_503_and_recovery_needs_no_restart") {
        return;
    }
    let (name, _) = create_database().await;
    let postgres = crate::helpers::postgres_base();
    let hostport = postgres.rsplit('@').next().unwrap().to_owned();
    let proxy = Proxy::start(&hostport).await;
    let via_proxy = format!(
        "{}@127.0.0.1:{}/{name}",
        postgres.rsplit_once('@').unwrap().0,
        proxy.port
    );
    let app = spawn_with_config(name, crate::helpers::test_config(&via_proxy)).await;
    let tenant = app.bootstrap().await;
    let path = format!("/v1/workspaces/{}/activity", tenant.workspace_id);
    assert_eq!(
        app.get(&path, &tenant.token).send().await.unwrap().status(),
        200
    );

    proxy.cut();
    let started = std::time::Instant::now();
    let response = app.get(&path, &tenant.token).send().await.unwrap();
    assert_api_error(response, 503, "unavailable").await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "answered, not hung"
    );
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_api_error(ready, 503, "unavailable").await;

    proxy.restore().await;
    let mut status = 0;
    for _ in 0..40 {
        status = app
            .get(&path, &tenant.token)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(status, 200, "recovered without a restart");
}

/// Postgres only: a network that silently drops packets (nothing is closed, nothing answers)
/// is a 503 within the statement deadline, not a hang; and it heals when packets flow again.
#[tokio::test]
async fn postgres_only_a_silent_partition_is_503_not_a_hang() {
    if !postgres_or_skip("postgres_only_a_silent_partition_is_503_not_a_hang") {
        return;
    }
    let (name, _) = create_database().await;
    let postgres = crate::helpers::postgres_base();
    let hostport = postgres.rsplit('@').next().unwrap().to_owned();
    let proxy = Proxy::start(&hostport).await;
    let via_proxy = format!(
        "{}@127.0.0.1:{}/{name}",
        postgres.rsplit_once('@').unwrap().0,
        proxy.port
    );
    let app = spawn_with_config(name, crate::helpers::test_config(&via_proxy)).await;
    let tenant = app.bootstrap().await;
    let path = format!("/v1/workspaces/{}/activity", tenant.workspace_id);
    // Warm: the read lane now holds a connection it will reuse without a ping.
    for _ in 0..3 {
        let ok = app.get(&path, &tenant.token).send().await.unwrap();
        assert_eq!(ok.status(), 200);
    }

    proxy.stall();
    let started = std::time::Instant::now();
    let response = app
        .get(&path, &tenant.token)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("answered, not hung");
    assert_api_error(response, 503, "unavailable").await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "answered within the deadline, not hung: {:?}",
        started.elapsed()
    );
    let started = std::time::Instant::now();
    let ready = app
        .client
        .get(app.url("/readyz"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("answered, not hung");
    assert_api_error(ready, 503, "unavailable").await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "readyz answered"
    );

    proxy.unstall();
    let mut status = 0;
    for _ in 0..40 {
        status = app
            .get(&path, &tenant.token)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(status, 200, "recovered without a restart");
}

/// The smallest pool (3): two connections stay on LISTEN and the read lane keeps none between
/// statements, so a write after a read still finds the third (it would otherwise wait out the
/// acquire timeout and be a 503).
#[tokio::test]
async fn the_smallest_pool_serves_reads_and_writes() {
    let app = spawn_app_with(|config| config.db_max_connections = 3).await;
    let tenant = app.bootstrap().await;
    let path = format!("/v1/workspaces/{}/activity", tenant.workspace_id);
    for _ in 0..3 {
        let read = app.get(&path, &tenant.token).send().await.unwrap();
        assert_eq!(read.status(), 200);
        let write = app.issue(&tenant.token, &issuance_body(&tenant)).await;
        assert_eq!(write.status(), 200);
    }
}
