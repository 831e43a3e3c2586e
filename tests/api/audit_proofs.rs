//! Audit proofs seen from outside: the head signer's signatures verify with the keys the
//! server publishes at /.well-known/jwks.json, a pass signs each moved head once, and a head
//! signature is not a webhook signature.

use control_plane::domain::audit_proof::ProofKeys;
use control_plane::domain::{ReceivedWebhook, WebhookKeys, parse_jwks, verify_signature};
use serde_json::Value;

use crate::support::{Call, issuance_body, tenant_app};

#[tokio::test]
async fn a_signed_head_verifies_with_the_published_keys_and_is_no_webhook_signature() {
    let (app, tenant) = tenant_app().await;
    for _ in 0..3 {
        let status = app
            .issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status();
        assert_eq!(status, 200);
    }
    let signed = app
        .services
        .sign_audit_heads(chrono::Utc::now())
        .await
        .unwrap();
    assert!(signed >= 1, "the moved head was signed");
    let ws = tenant.workspace_id;
    let store = app.services.store();
    let head = store.audit_head(ws).await.unwrap().unwrap();
    let latest = store
        .latest_signed_head(ws)
        .await
        .unwrap()
        .expect("a signed head");
    assert_eq!(
        (latest.seq, Some(latest.hash.clone())),
        (head.seq, head.hash)
    );

    let jwks: Value = app
        .client
        .get(app.url("/.well-known/jwks.json"))
        .ok_response()
        .await
        .json()
        .await
        .unwrap();
    let published = parse_jwks(&jwks).unwrap();
    assert!(ProofKeys::new(published.clone()).verifies_head(&latest));
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["kid"].as_str())
        .collect();
    assert!(kids.contains(&latest.seal.kid.as_str()), "{jwks}");

    // Nothing moved since: a second pass signs nothing.
    let again = app
        .services
        .sign_audit_heads(chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(again, 0);

    // The head's signature, offered as a webhook's v1a entry, verifies for no content.
    let entry = format!(
        "v1a,{}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            &latest.seal.signature
        )
    );
    let now = chrono::Utc::now().timestamp();
    let ts = now.to_string();
    let webhook = ReceivedWebhook {
        id: "cp-audit-head/v1",
        timestamp: &ts,
        signature: &entry,
        body: b"{}",
    };
    let keys = WebhookKeys {
        published,
        secrets: vec![],
    };
    assert!(verify_signature(&webhook, &keys, now, 300).is_err());
}
