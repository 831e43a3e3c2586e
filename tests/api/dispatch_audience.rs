//! A dispatch verifies only at the runner it was sent to: each runner's own Standard Webhooks
//! secret signs a `v1` entry beside the control plane's `v1a` ones, checked here with the
//! official Python libraries as well as `verify_webhook`; a dispatch captured at one runner
//! fails with every other runner's secret and names its runner for the `v1a` path. Secrets
//! rotate with an overlap, and are sealed at rest.

use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use control_plane::domain::{
    CorrelationId, RunnerSecret, WebhookKeys, WebhookVerifyError, verify_webhook,
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::deliveries::published_keys;
use crate::support::loopback::{Answer, Loopback, Received};
use crate::support::runner::submit;
use crate::support::{
    TestApp, WEBHOOK_PYTHON_VAR, captured_logs, create_pool, needs, spawn_app_with, sql_value,
};

/// A runner registered through the service layer, with what `cpctl runners register` shows.
struct Registered {
    id: Uuid,
    secret: RunnerSecret,
}

async fn register(app: &TestApp, pool: Uuid, url: Option<&str>) -> Registered {
    let done = app
        .services
        .register_runner(
            pool,
            "runner",
            None,
            url,
            &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
        )
        .await
        .expect("register a runner");
    Registered {
        id: done.runner.id,
        secret: done.webhook_secret,
    }
}

fn with_secret(secret: &RunnerSecret) -> WebhookKeys {
    WebhookKeys {
        published: vec![],
        secrets: vec![secret.clone()],
    }
}

fn check(request: &Received, keys: &WebhookKeys, runner: Uuid) -> Result<Uuid, WebhookVerifyError> {
    let now = chrono::Utc::now().timestamp();
    verify_webhook(&request.as_webhook(), keys, runner, now, 300).map(|p| p.data.runner_id)
}

/// What the official libraries say of `request` with `secret`: (standardwebhooks, svix).
fn libraries_accept(request: &Received, secret: &RunnerSecret) -> (bool, bool) {
    let python = std::env::var(WEBHOOK_PYTHON_VAR).expect("checked by needs!");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/webhooks/verify.py");
    let case = json!({
        "secret": secret.whsec(),
        "id": request.id,
        "timestamp": request.timestamp,
        "signature": request.signature,
        "body": STANDARD.encode(&request.body),
    });
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the Python verifier");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), case.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the verifier failed");
    let said: Value = serde_json::from_slice(&out.stdout).expect("the verifier's JSON");
    (
        said["standardwebhooks"].as_bool().unwrap(),
        said["svix"].as_bool().unwrap(),
    )
}

fn versions(signature: &str) -> Vec<&str> {
    signature
        .split(' ')
        .map(|e| e.split_once(',').map_or(e, |(v, _)| v))
        .collect()
}

#[tokio::test]
async fn a_dispatch_verifies_with_its_runners_secret_and_at_no_other_runner() {
    needs!(WebhookLibraries);
    let receiver = Loopback::start(&[Answer::Status(202)]).await;
    let app = spawn_app_with(|_| {}).await;
    let ours = app.bootstrap().await;
    let theirs = app.bootstrap().await;
    let our_pool = create_pool(&app, ours.workspace_id, "runners").await;
    let their_pool = create_pool(&app, theirs.workspace_id, "runners").await;
    let runner = register(&app, our_pool, Some(&receiver.url)).await;
    // The attacker's runner, in another organisation: it receives the dispatch it forwards.
    let other = register(&app, their_pool, None).await;
    submit(&app, &ours, our_pool).await;
    let request = receiver.wait_for(1).await.remove(0);
    assert_eq!(versions(&request.signature), ["v1", "v1a"]);

    assert_eq!(
        check(&request, &with_secret(&runner.secret), runner.id),
        Ok(runner.id)
    );
    assert_eq!(
        libraries_accept(&request, &runner.secret),
        (true, true),
        "Standard Webhooks and Svix verify with the runner's secret"
    );
    // Forwarded to the other runner, within the five minutes.
    assert_eq!(
        check(&request, &with_secret(&other.secret), other.id),
        Err(WebhookVerifyError::NoMatch)
    );
    assert_eq!(libraries_accept(&request, &other.secret), (false, false));
    // The v1a path verifies the signature, then refuses a dispatch naming another runner.
    let published = published_keys(&app);
    assert_eq!(check(&request, &published, runner.id), Ok(runner.id));
    assert_eq!(
        check(&request, &published, other.id),
        Err(WebhookVerifyError::OtherRunner)
    );
}

#[tokio::test]
async fn a_rotated_secret_signs_beside_the_old_one_until_the_overlap_ends() {
    let receiver = Loopback::start(&[]).await;
    let app = spawn_app_with(|_| {}).await;
    let tenant = app.bootstrap().await;
    let pool = create_pool(&app, tenant.workspace_id, "runners").await;
    let runner = register(&app, pool, Some(&receiver.url)).await;
    let rotate = |overlap| {
        let services = app.services.clone();
        async move {
            services
                .rotate_runner_secret(
                    runner.id,
                    overlap,
                    &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
                )
                .await
                .expect("rotate")
        }
    };
    let first = runner.secret.clone();
    let hour = rotate(Duration::from_secs(3600)).await;
    assert!(hour.previous_retires_at.is_some());
    assert_ne!(hour.secret, first);
    submit(&app, &tenant, pool).await;
    let during = receiver.wait_for(1).await.remove(0);
    assert_eq!(versions(&during.signature), ["v1", "v1", "v1a"]);
    for secret in [&first, &hour.secret] {
        assert_eq!(
            check(&during, &with_secret(secret), runner.id),
            Ok(runner.id)
        );
    }

    // No overlap: the replaced secret stops at once, and the first is long gone.
    let now = rotate(Duration::ZERO).await;
    submit(&app, &tenant, pool).await;
    let after = receiver.wait_for(2).await.remove(1);
    assert_eq!(versions(&after.signature), ["v1", "v1a"]);
    assert_eq!(
        check(&after, &with_secret(&now.secret), runner.id),
        Ok(runner.id)
    );
    for old in [&first, &hour.secret] {
        assert_eq!(
            check(&after, &with_secret(old), runner.id),
            Err(WebhookVerifyError::NoMatch)
        );
    }
    let too_long = app
        .services
        .rotate_runner_secret(
            runner.id,
            Duration::from_secs(31 * 24 * 3600),
            &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
        )
        .await;
    assert!(too_long.is_err(), "an overlap past 30 days is refused");
}

#[tokio::test]
async fn a_runner_secret_is_sealed_at_rest_and_never_logged() {
    let app = spawn_app_with(|_| {}).await;
    let tenant = app.bootstrap().await;
    let pool = create_pool(&app, tenant.workspace_id, "runners").await;
    let runner = register(&app, pool, None).await;
    let stored = sql_value!(
        app,
        Vec<u8>,
        "SELECT webhook_secret FROM runners WHERE id = $1",
        runner.id
    );
    let raw = runner.secret.as_bytes();
    assert!(stored.len() > raw.len(), "sealed: nonce and tag added");
    assert!(!stored.windows(raw.len()).any(|w| w == raw));
    let whsec = runner.secret.whsec();
    assert!(!String::from_utf8_lossy(&stored).contains(&whsec[6..]));
    assert!(
        !captured_logs().contains(&whsec[6..]),
        "a secret was logged"
    );
    // The event says a runner was registered, not with what.
    let data = sql_value!(
        app,
        String,
        "SELECT CAST(data AS TEXT) FROM audit_events WHERE target_id = $1",
        runner.id
    );
    assert!(!data.contains(&whsec[6..]), "{data}");
}
