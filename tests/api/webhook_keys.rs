//! The webhook signing keys: published at /.well-known/jwks.json (outside /v1, no token), and
//! a signature made by the server's signer verifies with the published keys, during a
//! rotation's overlap too.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use control_plane::domain::{
    ReceivedWebhook, WEBHOOK_TOLERANCE_SECS, WebhookKeys, WebhookSigner, parse_jwks,
    verify_signature,
};
use serde_json::Value;

use crate::support::{Call, captured_logs, spawn_app, spawn_app_with};

async fn published(app: &crate::support::TestApp) -> Value {
    let response = app
        .client
        .get(app.url("/.well-known/jwks.json"))
        .ok_response()
        .await;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(header("content-type"), "application/jwk-set+json");
    assert_eq!(header("cache-control"), "max-age=300");
    response.json().await.unwrap()
}

#[tokio::test]
async fn the_published_key_verifies_what_the_server_signs() {
    let app = spawn_app().await;
    let jwks = published(&app).await;
    let keys = jwks["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "{jwks}");
    assert_eq!(keys[0]["kty"], "OKP");
    assert_eq!(keys[0]["crv"], "Ed25519");
    assert_eq!(keys[0]["alg"], "EdDSA");
    assert_eq!(keys[0]["use"], "sig");
    let signer = app.services.webhook_signer();
    assert_eq!(keys[0]["kid"], signer.public_keys()[0].kid);

    let verifying = parse_jwks(&jwks).unwrap();
    let now = chrono::Utc::now().timestamp();
    let body = br#"{"type":"runner_command.dispatched"}"#;
    let header = signer.sign("msg_jwks", now, body, &[]);
    let keys = WebhookKeys {
        published: verifying,
        secrets: vec![],
    };
    let ts = now.to_string();
    let received = |body| ReceivedWebhook {
        id: "msg_jwks",
        timestamp: &ts,
        signature: &header,
        body,
    };
    verify_signature(&received(body), &keys, now, WEBHOOK_TOLERANCE_SECS)
        .expect("verifies with the published key");
    assert!(verify_signature(&received(b"{}"), &keys, now, WEBHOOK_TOLERANCE_SECS).is_err());
}

#[tokio::test]
async fn configured_keys_are_all_published_and_all_sign_during_a_rotation() {
    let (new, old) = ([21u8; 32], [12u8; 32]);
    let configured = format!("{},{}", STANDARD.encode(new), STANDARD.encode(old));
    let app = spawn_app_with(|c| c.webhook_signing_keys = Some(configured.clone())).await;
    let jwks = published(&app).await;
    let published = parse_jwks(&jwks).unwrap();
    assert_eq!(published.len(), 2, "{jwks}");
    let only = |seed: [u8; 32]| WebhookSigner::from_seeds(&[seed.to_vec()]).unwrap();
    let (new_kid, old_kid) = (
        only(new).public_keys()[0].kid.clone(),
        only(old).public_keys()[0].kid.clone(),
    );
    assert_eq!(jwks["keys"][0]["kid"], new_kid.as_str(), "current first");
    assert_eq!(jwks["keys"][1]["kid"], old_kid.as_str());

    let now = chrono::Utc::now().timestamp();
    let header = app
        .services
        .webhook_signer()
        .sign("msg_rot", now, b"x", &[]);
    let ts = now.to_string();
    let received = ReceivedWebhook {
        id: "msg_rot",
        timestamp: &ts,
        signature: &header,
        body: b"x",
    };
    assert_eq!(header.split(' ').count(), 2, "{header}");
    // A runner that knows only one of the two keys verifies.
    for seed in [new, old] {
        let keys = WebhookKeys {
            published: only(seed)
                .public_keys()
                .into_iter()
                .map(|k| k.key)
                .collect(),
            secrets: vec![],
        };
        verify_signature(&received, &keys, now, 300).expect("either key verifies");
    }
    let logs = captured_logs();
    for seed in [new, old] {
        assert!(!logs.contains(&STANDARD.encode(seed)), "a key was logged");
    }
}
