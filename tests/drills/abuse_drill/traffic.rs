//! The traffic around the attacks: the well-behaved client and the runner, which keep working
//! through every phase and tally what they get, the attacker's flood (workers looping on one
//! request until a deadline), and the HTTP clients that leave from a chosen loopback address so
//! that each party has connections of its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use control_plane::domain::sign_request;
use serde_json::{Value, json};

use super::Res;
use super::drill::Drill;
use super::tally::{Tally, outcome_of};
use super::tenant::Tenant;

/// The well-behaved client: its organisation's activity, five times a second.
pub(super) fn good_client(drill: Arc<Drill>, t: Arc<Tenant>) {
    tokio::spawn(async move {
        let url = format!(
            "{}/v1/workspaces/{}/activity?limit=5",
            drill.server, t.workspace
        );
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if drill.paused.load(Ordering::Relaxed) {
                continue;
            }
            let outcome = outcome_of(
                drill
                    .good_client
                    .get(&url)
                    .bearer_auth(&t.token)
                    .send()
                    .await,
            );
            drill.good.add(outcome);
        }
    });
}

/// The runner: twice a second a command is submitted to its pool (by its organisation's token)
/// and the runner reports the delivery, signed, from the same address as the attacker. Every
/// submission is counted: one that fails, or whose answer names no delivery, is a failure.
pub(super) fn good_runner(
    drill: Arc<Drill>,
    t: Arc<Tenant>,
    runner: (uuid::Uuid, uuid::Uuid, [u8; 32]),
) {
    tokio::spawn(async move {
        let (runner_id, key_id, private) = runner;
        let submit = format!(
            "{}/v1/workspaces/{}/runner-commands",
            drill.server, t.workspace
        );
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if drill.paused.load(Ordering::Relaxed) {
                continue;
            }
            let created = drill
                .good_client
                .post(&submit)
                .bearer_auth(&t.token)
                .json(&json!({ "poolId": t.pool, "command": "echo" }))
                .send()
                .await;
            let delivery = match created {
                Ok(r) if r.status().is_success() => {
                    let status = r.status().as_u16();
                    let delivery = r
                        .json::<Value>()
                        .await
                        .ok()
                        .and_then(|v| v["command"]["deliveryId"].as_str().map(str::to_owned));
                    drill.submitted.add(match delivery {
                        Some(_) => status.to_string(),
                        None => format!("{status} without deliveryId"),
                    });
                    delivery
                }
                other => {
                    drill.submitted.add(outcome_of(other));
                    None
                }
            };
            let Some(delivery) = delivery else { continue };
            let path = format!("/v1/runner/webhook-deliveries/{delivery}/status");
            let body = br#"{"status":"received"}"#;
            let nonce = uuid::Uuid::new_v4().simple().to_string();
            let headers = sign_request(
                &private,
                runner_id,
                key_id,
                "POST",
                &path,
                body,
                chrono::Utc::now().timestamp(),
                &nonce,
            );
            let mut request = drill
                .runner_client
                .post(format!("{}{path}", drill.server))
                .header("content-type", "application/json")
                .body(body.to_vec());
            for (name, value) in headers.pairs() {
                request = request.header(name, value);
            }
            drill.reported.add(outcome_of(request.send().await));
        }
    });
}

/// `workers` loops of `one` until the deadline; their outcomes tallied.
pub(super) async fn flood<F, Fut>(
    workers: usize,
    deadline: Instant,
    one: F,
) -> BTreeMap<String, u64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = String> + Send,
{
    let tally = Arc::new(Tally::default());
    let one = Arc::new(one);
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (tally, one) = (tally.clone(), one.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    tally.add(one(w).await);
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    tally.take()
}

/// A client whose connections leave from `address` (any of 127.0.0.0/8 reaches the server).
pub(super) fn client_from(address: [u8; 4]) -> Res<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(address))
        .timeout(Duration::from_secs(30))
        .build()?)
}
