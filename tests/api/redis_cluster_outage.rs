//! A master of a Redis Cluster stopped mid-test (a cluster of the test's own, not the run's):
//! a keyed request whose record it held gets 503 with `retry-after`, first while the node
//! refuses connections and then while the cluster answers `CLUSTERDOWN`; nothing hangs or
//! panics, and once the node is back (without its keys) the same retry runs nothing twice: the
//! outcome committed with the change replays.

use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::redis_cluster::RedisCluster;
use crate::support::*;

async fn submit_keyed(
    app: &TestApp,
    tenant: &Tenant,
    body: &Value,
    key: &str,
) -> reqwest::Response {
    app.post_json(
        &routes::runner_commands(tenant.workspace_id),
        &tenant.token,
        body,
    )
    .header("idempotency-key", key)
    .response()
    .await
}

/// A 503 `unavailable` that tells the client when to come back.
async fn assert_unavailable(response: reqwest::Response) {
    let retry: u64 = response
        .headers()
        .get("retry-after")
        .expect("retry-after on a 503")
        .to_str()
        .unwrap()
        .parse()
        .expect("retry-after in whole seconds");
    assert!(retry >= 1);
    assert_api_error(response, 503, "unavailable").await;
}

#[tokio::test]
async fn redis_only_a_stopped_cluster_master_is_503_and_its_retry_runs_once_after_it_returns() {
    needs!(Postgres, RedisCluster);
    const NODE_TIMEOUT_MS: u32 = 1_000;
    let cluster = RedisCluster::start().expect("a Redis Cluster of this test's own");
    let app = spawn_app_with(|c| c.redis_url = Some(cluster.url())).await;
    let tenant = app.bootstrap().await;
    let pool = create_pool(&app, tenant.workspace_id, "cluster").await;
    let body = json!({"poolId": pool, "command": "deploy", "args": ["v1"]});
    let key = format!("cluster-{}", Uuid::new_v4().simple());

    let first = submit_keyed(&app, &tenant, &body, &key).await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();

    // The master that holds the key's record (its principal's slot).
    let holder = cluster
        .holder_of(&format!("{}idem:*", app.config.redis_prefix))
        .expect("one master holds the idempotency record");
    cluster.stop_node(holder);
    assert_unavailable(submit_keyed(&app, &tenant, &body, &key).await).await;

    // Once the other masters mark it failed, every slot answers CLUSTERDOWN: still a 503.
    let other = *cluster.ports().iter().find(|&&p| p != holder).unwrap();
    for _ in 0..200 {
        if cluster.state(other).as_deref() == Some("fail") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        cluster.state(other).as_deref(),
        Some("fail"),
        "the cluster saw the master go"
    );
    assert_unavailable(submit_keyed(&app, &tenant, &body, &key).await).await;
    let fresh = format!("cluster-{}", Uuid::new_v4().simple());
    assert_unavailable(submit_keyed(&app, &tenant, &body, &fresh).await).await;

    cluster
        .restart_node(holder, NODE_TIMEOUT_MS)
        .expect("the master starts again");
    cluster.wait_ok().expect("the cluster heals");
    // The client reconnects on its own; until it has, the answer is still a 503.
    let mut again = submit_keyed(&app, &tenant, &body, &key).await;
    for _ in 0..50 {
        if again.status() != 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        again = submit_keyed(&app, &tenant, &body, &key).await;
    }
    assert_eq!(again.status(), 200, "healed without restarting the server");
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again, first, "the same answer");
    let commands = sql_value!(app, i64, "SELECT count(*) FROM runner_commands");
    assert_eq!(commands, 1, "the command ran once");
}
