//! Redis stopped mid-test: idempotent requests get 503, reads are served, issuance is refused,
//! nothing panics, and everything recovers when Redis returns, without a restart.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Call, assert_api_error, issuance_body, needs, routes, spawn_app_with};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_redis(port: u16) -> Child {
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server on the PATH");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "redis did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[tokio::test]
async fn redis_only_an_outage_is_503_for_idempotent_requests_and_heals_itself() {
    // Not on the cluster run: this test's Redis is its own single one, so there it would only
    // repeat the Redis run; `redis_cluster_outage.rs` stops a cluster's master instead.
    needs!(SingleRedis, RedisServer);
    let port = free_port();
    let mut redis = start_redis(port);
    let app = spawn_app_with(|c| c.redis_url = Some(format!("redis://127.0.0.1:{port}"))).await;
    let tenant = app.bootstrap().await;
    let path = routes::activity(tenant.workspace_id);
    let keyed = |key: &str| {
        app.post_json(routes::ISSUE_TOKEN, &tenant.token, &issuance_body(&tenant))
            .header("idempotency-key", key)
            .send()
    };
    assert_eq!(
        keyed("outage-key-before-00001").await.unwrap().status(),
        200
    );

    redis.kill().unwrap();
    redis.wait().unwrap();
    let started = Instant::now();
    assert_api_error(
        keyed("outage-key-during-00001").await.unwrap(),
        503,
        "unavailable",
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered quickly, not hung"
    );
    // Reads fail open (served without a limit); issuance fails closed.
    let read = app.get(&path, &tenant.token).ok_response().await;
    assert!(read.headers().get("x-ratelimit-limit").is_none());
    assert_api_error(
        app.issue(&tenant.token, &issuance_body(&tenant)).await,
        503,
        "unavailable",
    )
    .await;

    let mut redis = start_redis(port);
    let mut status = 0;
    for _ in 0..50 {
        status = keyed("outage-key-after-000001")
            .await
            .unwrap()
            .status()
            .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status, 200, "recovered without restarting the server");
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(r#"rate_limiter_unavailable_total{class="read",decision="served"} 1"#),
        "{metrics}"
    );
    let _ = redis.kill();
    let _ = redis.wait();
}
