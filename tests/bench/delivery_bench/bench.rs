//! The control plane under measurement, driven over HTTP: `Bench` holds its base URL, its
//! services (for set-up), the tenant's workspace and token, and makes pools of runners and
//! submits commands C at once; `in_parallel` is the worker pool that runs N calls that way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use control_plane::domain::CorrelationId;
use control_plane::service::Services;
use serde_json::{Value, json};
use uuid::Uuid;

/// Runs `total` calls of `one(i)`, `concurrency` at once; returns each call's result.
pub(super) async fn in_parallel<T, F, Fut>(
    total: usize,
    concurrency: usize,
    one: F,
) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let one = Arc::new(one);
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (next, one) = (next.clone(), one.clone());
        workers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return anyhow::Ok(out);
                }
                out.push(one(i).await?);
            }
        }));
    }
    let mut all = Vec::with_capacity(total);
    for worker in workers {
        all.extend(worker.await??);
    }
    Ok(all)
}

/// A control plane in process with a tenant.
pub(super) struct Bench {
    pub(super) base: String,
    pub(super) services: Arc<Services>,
    pub(super) workspace: Uuid,
    pub(super) token: String,
    pub(super) client: reqwest::Client,
}

impl Bench {
    /// A pool with `runners` runners (each with a key), receiving at `url` when given.
    pub(super) async fn pool(
        &self,
        name: &str,
        url: Option<&str>,
        runners: usize,
    ) -> anyhow::Result<(Uuid, Vec<control_plane::service::RegisteredRunner>)> {
        let cid = CorrelationId::generate();
        let pool = self
            .services
            .create_pool(
                self.workspace,
                name,
                &control_plane::storage::WriteContext::admin(&cid),
            )
            .await?
            .id;
        let mut registered = Vec::new();
        for i in 0..runners.max(1) {
            let runner_name = format!("{name}-runner-{i}");
            registered.push(
                self.services
                    .register_runner(
                        pool,
                        &runner_name,
                        None,
                        url,
                        &control_plane::storage::WriteContext::admin(&cid),
                    )
                    .await?,
            );
        }
        Ok((pool, registered))
    }

    /// Submits N commands to `pool`, C at once: (delivery id, instant just before sending).
    pub(super) async fn submit_all(
        &self,
        pool: Uuid,
        n: usize,
        concurrency: usize,
    ) -> anyhow::Result<Vec<(String, Instant)>> {
        let url = format!(
            "{}/v1/workspaces/{}/runner-commands",
            self.base, self.workspace
        );
        let (client, token) = (self.client.clone(), self.token.clone());
        in_parallel(n, concurrency, move |_| {
            let (client, url, token) = (client.clone(), url.clone(), token.clone());
            async move {
                let body = json!({ "poolId": pool, "command": "deploy", "args": ["--env", "prod"], "timeoutSeconds": 120 });
                let started = Instant::now();
                let response = client.post(&url).bearer_auth(&token).json(&body).send().await?;
                let status = response.status();
                let answer: Value = response.json().await.unwrap_or(Value::Null);
                if !status.is_success() {
                    bail!("submission answered {status}: {answer}");
                }
                let delivery = answer["command"]["deliveryId"]
                    .as_str()
                    .context("no deliveryId in the submission's answer")?
                    .to_owned();
                Ok((delivery, started))
            }
        })
        .await
    }
}
