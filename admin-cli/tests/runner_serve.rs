//! The example runner (`cpctl runners serve`), in process, against a real control plane in
//! process: a dispatch of a really submitted command, signed with the runner's own secret, is
//! answered 202 and the command ends `succeeded` with the echoed line; the same `webhook-id`
//! again is a 200 that runs nothing; a bad signature, a `v1a`-only one (the runner trusts its
//! secret) and a dispatch naming another runner are 401s, and a signed non-dispatch a 400. On Postgres when it
//! answers (and `TEST_RECORDS` is not `sqlite`), otherwise on an SQLite file.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use control_plane::config::ServerConfig;
use control_plane::domain::{
    CorrelationId, DISPATCH_EVENT_TYPE, DispatchData, DispatchPayload, ExpiresInDays, RunnerSecret,
    Timestamp, WebhookSigner,
};
use control_plane::service::BootstrapInput;
use control_plane::startup::Application;
use cpctl::runner::{RunnerConfig, RunnerServer};
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

#[path = "../../tests/support/services.rs"]
mod services;

/// A fresh records store: (its URL, the Postgres database to drop or the directory to delete).
/// Falls back to SQLite, with one line, when Postgres does not answer.
async fn records(test: &str) -> (String, Result<String, std::path::PathBuf>) {
    let mut sqlite = std::env::var("TEST_RECORDS").is_ok_and(|v| v == "sqlite");
    if !sqlite && !services::answers(&services::postgres_base()) {
        let at = services::address(&services::postgres_base());
        services::missing(&format!("Postgres at {at} does not answer"));
        services::say(&format!(
            "{test}: Postgres at {at} does not answer; on SQLite instead"
        ));
        sqlite = true;
    }
    if sqlite {
        let dir = std::env::temp_dir().join(format!("cp-runner-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        return (
            format!("sqlite://{}", dir.join("cp.db").display()),
            Err(dir),
        );
    }
    let name = format!("cp_runner_{}", Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&format!("{}/postgres", services::postgres_base()))
        .await
        .unwrap();
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await
        .unwrap();
    (format!("{}/{name}", services::postgres_base()), Ok(name))
}

async fn clean(place: Result<String, std::path::PathBuf>) {
    match place {
        Err(dir) => {
            let _ = std::fs::remove_dir_all(dir);
        }
        Ok(name) => {
            if let Ok(mut admin) =
                PgConnection::connect(&format!("{}/postgres", services::postgres_base())).await
            {
                let _ = admin
                    .execute(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .await;
            }
        }
    }
}

async fn post_webhook(
    client: &reqwest::Client,
    url: &str,
    id: &str,
    timestamp: i64,
    signature: &str,
    body: &[u8],
) -> (u16, Value) {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A control plane in process with a tenant, a pool and a runner with a generated key.
struct ControlPlane {
    base: String,
    services: std::sync::Arc<control_plane::service::Services>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    place: Result<String, std::path::PathBuf>,
    workspace: Uuid,
    pool: Uuid,
    token: String,
    registered: control_plane::service::RegisteredRunner,
}

impl ControlPlane {
    async fn start(test: &str) -> Self {
        let (database_url, place) = records(test).await;
        let mut config = ServerConfig::for_database(&database_url);
        // The test runners listen on loopback over plain http.
        config.delivery_http_hosts = Some(control_plane::domain::EgressPolicy::LOOPBACK.into());
        let generous = control_plane::config::RateOption(Some(
            control_plane::storage::Rate::parse("100000/m").unwrap(),
        ));
        config.rate_limit = generous;
        config.runner_address_rate_limit = generous;
        config.runner_rate_limit = generous;
        let app = Application::build(&config).await.expect("build the server");
        let base = format!("http://127.0.0.1:{}", app.port());
        let services = app.services();
        let server = tokio::spawn(app.run());
        let cid = CorrelationId::generate();
        let done = services
            .bootstrap(
                BootstrapInput {
                    organisation: "runner-org".into(),
                    workspace: "main".into(),
                    admin_email: "admin@runner.test".into(),
                    expires_in_days: ExpiresInDays::parse(30).unwrap(),
                },
                &cid,
            )
            .await
            .unwrap();
        let workspace = done.workspace.id;
        let pool = services
            .create_pool(
                workspace,
                "builders",
                &control_plane::storage::WriteContext::admin(&cid),
            )
            .await
            .unwrap()
            .id;
        let registered = services
            .register_runner(
                pool,
                "echo-runner",
                None,
                None,
                &control_plane::storage::WriteContext::admin(&cid),
            )
            .await
            .unwrap();
        Self {
            base,
            services,
            server,
            place,
            workspace,
            pool,
            token: done.credential.secret.expose().to_owned(),
            registered,
        }
    }

    /// Submits `deploy --env prod` over HTTP: (command id, delivery id).
    async fn submit(&self, client: &reqwest::Client) -> (Uuid, Uuid) {
        let submitted: Value = client
            .post(format!(
                "{}/v1/workspaces/{}/runner-commands",
                self.base, self.workspace
            ))
            .bearer_auth(&self.token)
            .json(&json!({ "poolId": self.pool, "command": "deploy", "args": ["--env", "prod"], "timeoutSeconds": 120 }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let command = &submitted["command"];
        (
            command["id"].as_str().unwrap().parse().unwrap(),
            command["deliveryId"].as_str().unwrap().parse().unwrap(),
        )
    }

    async fn runner(&self) -> RunnerServer {
        RunnerServer::bind(RunnerConfig {
            listen: "127.0.0.1:0".into(),
            control_plane: self.base.clone(),
            runner_id: self.registered.runner.id,
            key_id: self.registered.key_id,
            private_key: self.registered.private_key.unwrap(),
            webhook_secret: Some(self.registered.webhook_secret.clone()),
            pinned_keys: vec![],
            dedup_capacity: 100,
        })
        .await
        .unwrap()
    }

    /// Waits (at most 20 s) until the command is `succeeded`.
    async fn succeeded(&self, delivery: Uuid) -> control_plane::storage::DeliveryContext {
        for _ in 0..200 {
            let context = self.services.store().get_delivery(delivery).await.unwrap();
            let context = context.expect("the delivery exists");
            if context.command_status.as_str() == "succeeded" {
                return context;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the command did not succeed within 20 s");
    }

    async fn stop(self) {
        self.server.abort();
        let _ = self.server.await;
        clean(self.place).await;
    }
}

/// The whole loop a user copies: the dispatcher sends the submitted command to the example
/// runner registered with a URL, which verifies it and reports it to `succeeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_command_reaches_the_example_runner_and_succeeds() {
    let cp = ControlPlane::start(services::test_name!()).await;
    let runner = cp.runner().await;
    let url = format!("http://127.0.0.1:{}/", runner.port());
    let runner_task = tokio::spawn(runner.run());
    cp.services
        .set_runner_url(
            cp.registered.runner.id,
            Some(&url),
            &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
        )
        .await
        .unwrap();
    let (_, delivery) = cp.submit(&reqwest::Client::new()).await;
    let context = cp.succeeded(delivery).await;
    assert_eq!(context.delivery.exit_code, Some(0));
    assert_eq!(
        context.delivery.detail.as_deref(),
        Some("deploy --env prod")
    );
    let report = cp.services.delivery_report(delivery).await.unwrap();
    assert_eq!(report.attempts.len(), 1, "{report:?}");
    assert_eq!(report.attempts[0].status_code, Some(202));
    runner_task.abort();
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_runner_verifies_deduplicates_and_reports_success() {
    let cp = ControlPlane::start(services::test_name!()).await;
    let (services, registered, pool, workspace) =
        (cp.services.clone(), &cp.registered, cp.pool, cp.workspace);
    let client = reqwest::Client::new();
    let (command_id, delivery_id) = cp.submit(&client).await;
    let runner = cp.runner().await;
    let runner_url = format!("http://127.0.0.1:{}/", runner.port());
    let runner_task = tokio::spawn(runner.run());

    let now = chrono::Utc::now();
    let payload = DispatchPayload {
        event_type: DISPATCH_EVENT_TYPE.into(),
        timestamp: Timestamp::new(now),
        data: DispatchData {
            delivery_id,
            command_id,
            workspace_id: workspace,
            pool_id: pool,
            runner_id: registered.runner.id,
            command: "deploy".into(),
            args: vec!["--env".into(), "prod".into()],
            environment_id: None,
            timeout_seconds: 120,
            deadline_at: Timestamp::new(now + chrono::Duration::seconds(120)),
            attempt: 1,
        },
    };
    let body = serde_json::to_vec(&payload).unwrap();
    let ts = now.timestamp();
    let msg_id = format!("msg_{delivery_id}");

    // Signed by another key: refused, and not remembered.
    let stranger = WebhookSigner::from_seeds(&[vec![9u8; 32]]).unwrap();
    let forged = stranger.sign(&msg_id, ts, &body, &[RunnerSecret::generate()]);
    let (status, answer) = post_webhook(&client, &runner_url, &msg_id, ts, &forged, &body).await;
    assert_eq!(status, 401, "{answer}");
    // Signed by the control plane, but only for the v1a path: this runner verifies with its
    // own secret and fetches no key set.
    let v1a_only = services.webhook_signer().sign(&msg_id, ts, &body, &[]);
    let (status, _) = post_webhook(&client, &runner_url, &msg_id, ts, &v1a_only, &body).await;
    assert_eq!(status, 401);
    // Signed with this runner's secret, but naming another runner (a forwarded dispatch).
    let secrets = [registered.webhook_secret.clone()];
    let mut elsewhere = payload.clone();
    elsewhere.data.runner_id = Uuid::new_v4();
    let elsewhere = serde_json::to_vec(&elsewhere).unwrap();
    let misaddressed = services
        .webhook_signer()
        .sign(&msg_id, ts, &elsewhere, &secrets);
    let (status, answer) =
        post_webhook(&client, &runner_url, &msg_id, ts, &misaddressed, &elsewhere).await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(answer["error"], "the dispatch is for another runner");
    // Signed, but tampered with on the way.
    let signature = services.webhook_signer().sign(&msg_id, ts, &body, &secrets);
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    let (status, _) = post_webhook(&client, &runner_url, &msg_id, ts, &signature, &tampered).await;
    assert_eq!(status, 401);
    // Signed, but not a dispatch.
    let other = b"{\"type\":\"something.else\"}";
    let other_sig = services
        .webhook_signer()
        .sign("msg_other", ts, other, &secrets);
    let (status, _) = post_webhook(&client, &runner_url, "msg_other", ts, &other_sig, other).await;
    assert_eq!(status, 400);

    let (status, answer) = post_webhook(&client, &runner_url, &msg_id, ts, &signature, &body).await;
    assert_eq!(status, 202, "{answer}");
    // A redelivery of the same webhook-id is acknowledged and not run again.
    let (status, answer) = post_webhook(&client, &runner_url, &msg_id, ts, &signature, &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["duplicate"], true);

    let context = cp.succeeded(delivery_id).await;
    assert_eq!(context.delivery.status.as_str(), "succeeded");
    assert_eq!(context.delivery.exit_code, Some(0));
    assert_eq!(
        context.delivery.detail.as_deref(),
        Some("deploy --env prod")
    );

    // Nothing of the runner's key in what it answered.
    let key = STANDARD.encode(registered.private_key.unwrap());
    assert!(!answer.to_string().contains(&key));

    runner_task.abort();
    cp.stop().await;
}

/// A dispatch for `runner` with a fresh delivery id, and its webhook-id.
fn dispatch_for(runner: Uuid) -> (String, Vec<u8>) {
    let now = chrono::Utc::now();
    let payload = DispatchPayload {
        event_type: DISPATCH_EVENT_TYPE.into(),
        timestamp: Timestamp::new(now),
        data: DispatchData {
            delivery_id: Uuid::new_v4(),
            command_id: Uuid::new_v4(),
            workspace_id: Uuid::new_v4(),
            pool_id: Uuid::new_v4(),
            runner_id: runner,
            command: "true".into(),
            args: vec![],
            environment_id: None,
            timeout_seconds: 60,
            deadline_at: Timestamp::new(now + chrono::Duration::seconds(60)),
            attempt: 1,
        },
    };
    (
        format!("msg_{}", payload.data.delivery_id),
        serde_json::to_vec(&payload).unwrap(),
    )
}

/// After a rotation that dropped the key the runner cached, the first webhook signed only by
/// the new key makes the runner fetch the key set again, once, and verify; an unknown
/// signature right after does not fetch again (a flood of them is not a flood of fetches).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_signature_refetches_the_keys_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use poem::listener::{Acceptor, Listener};

    // A stand-in control plane: a key set the test swaps, and every report accepted.
    let old = WebhookSigner::from_seeds(&[vec![1u8; 32]]).unwrap();
    let new = WebhookSigner::from_seeds(&[vec![2u8; 32]]).unwrap();
    let published = Arc::new(Mutex::new(old.jwks().to_string()));
    let fetches = Arc::new(AtomicUsize::new(0));
    let (keys, count) = (published.clone(), fetches.clone());
    let routes = poem::Route::new()
        .at(
            "/.well-known/jwks.json",
            poem::get(poem::endpoint::make_sync(move |_| {
                count.fetch_add(1, Ordering::SeqCst);
                keys.lock().unwrap().clone()
            })),
        )
        .at(
            "/v1/runner/webhook-deliveries/:id/status",
            poem::post(poem::endpoint::make_sync(|_| "{}")),
        );
    let acceptor = poem::listener::TcpListener::bind("127.0.0.1:0")
        .into_acceptor()
        .await
        .unwrap();
    let port = acceptor.local_addr()[0].as_socket_addr().unwrap().port();
    let fake = tokio::spawn(poem::Server::new_with_acceptor(acceptor).run(routes));

    let runner_id = Uuid::new_v4();
    let runner = RunnerServer::bind(RunnerConfig {
        listen: "127.0.0.1:0".into(),
        control_plane: format!("http://127.0.0.1:{port}"),
        runner_id,
        key_id: Uuid::new_v4(),
        private_key: [3u8; 32],
        webhook_secret: None,
        pinned_keys: vec![],
        dedup_capacity: 10,
    })
    .await
    .unwrap();
    let url = format!("http://127.0.0.1:{}/", runner.port());
    let runner_task = tokio::spawn(runner.run());
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "fetched at start");
    let client = reqwest::Client::new();
    let ts = chrono::Utc::now().timestamp();

    let (id, body) = dispatch_for(runner_id);
    let signature = old.sign(&id, ts, &body, &[]);
    let (status, _) = post_webhook(&client, &url, &id, ts, &signature, &body).await;
    assert_eq!(status, 202);
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "served from the cache");

    *published.lock().unwrap() = new.jwks().to_string();
    let (id, body) = dispatch_for(runner_id);
    let signature = new.sign(&id, ts, &body, &[]);
    let (status, answer) = post_webhook(&client, &url, &id, ts, &signature, &body).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(fetches.load(Ordering::SeqCst), 2, "fetched again once");

    let (id, body) = dispatch_for(runner_id);
    let signature = old.sign(&id, ts, &body, &[]);
    let (status, _) = post_webhook(&client, &url, &id, ts, &signature, &body).await;
    assert_eq!(status, 401, "the dropped key no longer verifies");
    assert_eq!(fetches.load(Ordering::SeqCst), 2, "no second fetch so soon");

    runner_task.abort();
    fake.abort();
}

/// With a pinned control-plane key the runner verifies `v1a` signatures without ever fetching
/// the key set; a plain-http control plane is refused unless it is on loopback.
#[tokio::test]
async fn a_pinned_key_needs_no_key_set_and_plain_http_is_loopback_only() {
    let pinned = WebhookSigner::from_seeds(&[vec![5u8; 32]]).unwrap();
    let config = |control_plane: &str, pinned_keys| RunnerConfig {
        listen: "127.0.0.1:0".into(),
        // Nothing listens there: a fetch would fail.
        control_plane: control_plane.into(),
        runner_id: Uuid::new_v4(),
        key_id: Uuid::new_v4(),
        private_key: [4u8; 32],
        webhook_secret: None,
        pinned_keys,
        dedup_capacity: 10,
    };
    for refused in [
        "http://10.0.0.8:8080",
        "http://cp.example.com",
        "ftp://127.0.0.1",
    ] {
        let err = RunnerServer::bind(config(refused, vec![]))
            .await
            .err()
            .expect("refused");
        assert!(format!("{err:#}").contains("--control-plane"), "{err:#}");
    }
    let key = pinned.public_keys()[0].key;
    let config = config("http://127.0.0.1:9", vec![key]);
    let runner_id = config.runner_id;
    let runner = RunnerServer::bind(config).await.unwrap();
    let url = format!("http://127.0.0.1:{}/", runner.port());
    let runner_task = tokio::spawn(runner.run());
    let client = reqwest::Client::new();
    let ts = chrono::Utc::now().timestamp();
    let (id, body) = dispatch_for(runner_id);
    let signature = pinned.sign(&id, ts, &body, &[]);
    let (status, answer) = post_webhook(&client, &url, &id, ts, &signature, &body).await;
    assert_eq!(status, 202, "{answer}");
    let stranger = WebhookSigner::from_seeds(&[vec![6u8; 32]]).unwrap();
    let (id, body) = dispatch_for(runner_id);
    let signature = stranger.sign(&id, ts, &body, &[]);
    let (status, _) = post_webhook(&client, &url, &id, ts, &signature, &body).await;
    assert_eq!(status, 401);
    runner_task.abort();
}
