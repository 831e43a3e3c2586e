//! The floor measurement: what a reqwest client gets from the minimal receiver directly, at the
//! bench's concurrency, with a signed dispatch body and headers of the real size. It bounds the
//! dispatch figures from below, and each other row is printed as a fraction of its rate.

use std::time::Instant;

use anyhow::bail;
use control_plane::domain::{
    DISPATCH_EVENT_TYPE, DispatchData, DispatchPayload, Timestamp, WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER, WebhookSigner,
};
use uuid::Uuid;

use super::Args;
use super::bench::in_parallel;
use super::receiver::Arrivals;
use super::report::{Row, percentile};

/// A dispatch body and headers of the real size, for the floor.
fn floor_request() -> (String, String, Vec<u8>) {
    let now = chrono::Utc::now();
    let payload = DispatchPayload {
        event_type: DISPATCH_EVENT_TYPE.into(),
        timestamp: Timestamp::new(now),
        data: DispatchData {
            delivery_id: Uuid::new_v4(),
            command_id: Uuid::new_v4(),
            workspace_id: Uuid::new_v4(),
            pool_id: Uuid::new_v4(),
            runner_id: Uuid::new_v4(),
            command: "deploy".into(),
            args: vec!["--env".into(), "prod".into()],
            environment_id: None,
            timeout_seconds: 120,
            deadline_at: Timestamp::new(now + chrono::Duration::seconds(120)),
            attempt: 1,
        },
    };
    let body = serde_json::to_vec(&payload).unwrap_or_default();
    let id = payload.data.delivery_id.to_string();
    let signature = WebhookSigner::from_seeds(&[vec![7u8; 32]])
        .map(|s| s.sign(&id, now.timestamp(), &body, &[]))
        .unwrap_or_default();
    (now.timestamp().to_string(), signature, body)
}

pub(super) async fn floor(url: &str, arrivals: &Arrivals, args: &Args) -> anyhow::Result<Row> {
    let client = reqwest::Client::new();
    let (timestamp, signature, body) = floor_request();
    let run = |total: usize| {
        let (client, url) = (client.clone(), url.to_owned());
        let (timestamp, signature, body) = (timestamp.clone(), signature.clone(), body.clone());
        in_parallel(total, args.concurrency, move |_| {
            let (client, url) = (client.clone(), url.clone());
            let (timestamp, signature, body) = (timestamp.clone(), signature.clone(), body.clone());
            async move {
                let started = Instant::now();
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header(WEBHOOK_ID_HEADER, Uuid::new_v4().to_string())
                    .header(WEBHOOK_TIMESTAMP_HEADER, timestamp)
                    .header(WEBHOOK_SIGNATURE_HEADER, signature)
                    .body(body)
                    .send()
                    .await?;
                if response.status() != reqwest::StatusCode::NO_CONTENT {
                    bail!("the receiver answered {}", response.status());
                }
                let _ = response.bytes().await?;
                Ok(started.elapsed())
            }
        })
    };
    // Warm-up: connections open, pages touched.
    run(args.floor_n / 10).await?;
    let started = Instant::now();
    let mut latencies = run(args.floor_n).await?;
    let elapsed = started.elapsed();
    arrivals.lock().unwrap_or_else(|e| e.into_inner()).clear();
    latencies.sort();
    Ok(Row {
        measure: "floor: reqwest → minimal receiver (204)".into(),
        count: args.floor_n,
        per_second: args.floor_n as f64 / elapsed.as_secs_f64(),
        latency: Some((percentile(&latencies, 0.5), percentile(&latencies, 0.99))),
    })
}
