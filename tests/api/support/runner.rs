//! A runner, as tests play one: a tenant with a pool and a registered runner ([`Fixture`]),
//! commands submitted to the pool, delivery reports signed with the runner's Ed25519 key and
//! posted to the status route, and the states those leave in the records. Delivery URLs for a
//! runner on loopback are in [`super::loopback`].

use std::fmt::Display;

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, SignedHeaders, sign_request};
use reqwest::Response;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};
use uuid::Uuid;

use super::client::assert_api_error;
use super::fixtures::{Tenant, create_pool};
use super::server::{TestApp, spawn_app, spawn_app_with};

/// A runner's identity and one of its keys.
#[derive(Clone, Copy)]
pub(crate) struct RunnerKey {
    pub(crate) runner_id: Uuid,
    pub(crate) key_id: Uuid,
    pub(crate) private_key: [u8; 32],
}

/// A tenant with one pool and one registered runner in it.
pub(crate) struct Fixture {
    pub(crate) app: TestApp,
    pub(crate) tenant: Tenant,
    pub(crate) pool: Uuid,
    pub(crate) runner: RunnerKey,
}

impl Fixture {
    /// The parts, to take apart in one line: `let (app, tenant, pool, runner) = ...`.
    pub(crate) fn parts(self) -> (TestApp, Tenant, Uuid, RunnerKey) {
        (self.app, self.tenant, self.pool, self.runner)
    }
}

pub(crate) async fn fixture() -> Fixture {
    fixture_on(spawn_app().await).await
}

/// [`fixture`] on a server configured by `configure` (a rate limit, a retry schedule ...).
pub(crate) async fn fixture_with(configure: impl FnOnce(&mut ServerConfig)) -> Fixture {
    fixture_on(spawn_app_with(configure).await).await
}

pub(crate) async fn fixture_on(app: TestApp) -> Fixture {
    let tenant = app.bootstrap().await;
    let pool = create_pool(&app, tenant.workspace_id, "runners").await;
    let runner = register(&app, pool, "runner-a").await;
    Fixture {
        app,
        tenant,
        pool,
        runner,
    }
}

pub(crate) async fn register(app: &TestApp, pool: Uuid, name: &str) -> RunnerKey {
    let registered = app
        .services
        .register_runner(
            pool,
            name,
            None,
            None,
            &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
        )
        .await
        .expect("register a runner");
    RunnerKey {
        runner_id: registered.runner.id,
        key_id: registered.key_id,
        private_key: registered.private_key.expect("a generated key pair"),
    }
}

/// Submits a command over HTTP; returns (command id, delivery id).
pub(crate) async fn submit(app: &TestApp, tenant: &Tenant, pool: Uuid) -> (Uuid, Uuid) {
    let path = format!("/v1/workspaces/{}/runner-commands", tenant.workspace_id);
    let command = json!({"poolId": pool, "command": "make", "args": ["test"]});
    let body: Value = app.post_ok(&path, &tenant.token, &command).await;
    let id = |field: &str| -> Uuid {
        body["command"][field]
            .as_str()
            .expect("an id")
            .parse()
            .expect("a uuid")
    };
    (id("id"), id("deliveryId"))
}

pub(crate) fn status_path(delivery: impl Display) -> String {
    format!("/v1/runner/webhook-deliveries/{delivery}/status")
}

pub(crate) fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub(crate) fn nonce() -> String {
    format!("nonce-{}", Uuid::new_v4().simple())
}

pub(crate) fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) fn sign(key: &RunnerKey, path: &str, body: &[u8], timestamp: i64) -> SignedHeaders {
    sign_request(
        &key.private_key,
        key.runner_id,
        key.key_id,
        "POST",
        path,
        body,
        timestamp,
        &nonce(),
    )
}

pub(crate) fn sign_with_nonce(
    key: &RunnerKey,
    path: &str,
    body: &[u8],
    nonce: &str,
) -> SignedHeaders {
    sign_request(
        &key.private_key,
        key.runner_id,
        key.key_id,
        "POST",
        path,
        body,
        now(),
        nonce,
    )
}

/// Signs `body` as `key` and posts it to the delivery's status route.
pub(crate) async fn report(
    app: &TestApp,
    key: &RunnerKey,
    delivery: impl Display,
    body: Value,
) -> Response {
    let path = status_path(delivery);
    let bytes = body.to_string().into_bytes();
    let signed = sign(key, &path, &bytes, now());
    send(app, &path, &bytes, &signed.pairs()).await
}

pub(crate) async fn send(
    app: &TestApp,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> Response {
    send_to(&app.client, &app.url(path), body, headers).await
}

pub(crate) async fn send_to(
    client: &reqwest::Client,
    url: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> Response {
    let mut request = client
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

pub(crate) async fn assert_refused(response: Response) {
    assert_api_error(response, 401, "invalid_signature").await;
}

/// The delivery's status in the records.
pub(crate) async fn delivery_status(app: &TestApp, delivery: Uuid) -> String {
    let sql = "SELECT status FROM webhook_deliveries WHERE id = $1";
    crate::support::sql_one!(&mut app.db().await, (String,), sql, delivery)
        .unwrap()
        .0
}

/// The command's status in the records.
pub(crate) async fn command_status_of(app: &TestApp, command: Uuid) -> String {
    let sql = "SELECT status FROM runner_commands WHERE id = $1";
    crate::support::sql_one!(&mut app.db().await, (String,), sql, command)
        .unwrap()
        .0
}
