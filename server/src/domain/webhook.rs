//! Outgoing webhooks to runners, signed as Standard Webhooks (https://www.standardwebhooks.com)
//! asymmetric signatures: `webhook-id`, `webhook-timestamp` and `webhook-signature`, whose
//! space-separated `v1a,<base64>` entries are Ed25519 signatures of
//! `{webhook-id}.{webhook-timestamp}.{body}` (the exact bytes). The control plane signs with
//! its own keys (`--webhook-signing-keys`) and publishes their public halves as a JWKS; runners
//! verify with [`verify_webhook`].

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::Timestamp;

pub const WEBHOOK_ID_HEADER: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub const WEBHOOK_SIGNATURE_HEADER: &str = "webhook-signature";

/// How far a webhook's timestamp may be from the receiver's clock (the standard's five minutes).
pub const WEBHOOK_TOLERANCE_SECS: i64 = 300;

/// The version prefix of an asymmetric (Ed25519) signature entry.
const V1A: &str = "v1a,";
/// The Standard Webhooks form of a public key: `whpk_` and the base64 of its 32 bytes.
const PUBLIC_KEY_PREFIX: &str = "whpk_";
/// More entries than any rotation needs: a longer header is refused before any verification.
const MAX_ENTRIES: usize = 16;

/// The bytes every entry signs: `{id}.{timestamp}.{body}`.
fn signed_content(msg_id: &str, timestamp: &str, body: &[u8]) -> Vec<u8> {
    let mut content = Vec::with_capacity(msg_id.len() + timestamp.len() + body.len() + 2);
    content.extend_from_slice(msg_id.as_bytes());
    content.push(b'.');
    content.extend_from_slice(timestamp.as_bytes());
    content.push(b'.');
    content.extend_from_slice(body);
    content
}

/// The control plane's webhook signing keys: the first is current, and every key signs, so a
/// runner that knows only the old or only the new key verifies during a rotation's overlap.
pub struct WebhookSigner {
    keys: Vec<SigningKey>,
}

/// One published key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookPublicKey {
    pub kid: String,
    pub key: VerifyingKey,
    /// The first configured key; the others are kept for the rotation's overlap.
    pub current: bool,
}

impl WebhookPublicKey {
    /// `whpk_<base64>`, the Standard Webhooks form.
    pub fn whpk(&self) -> String {
        format!(
            "{PUBLIC_KEY_PREFIX}{}",
            STANDARD.encode(self.key.as_bytes())
        )
    }

    /// Base64url without padding, the JWK `x`.
    pub fn x(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.key.as_bytes())
    }
}

impl WebhookSigner {
    /// From raw 32-byte Ed25519 seeds, current first. The error never holds key material.
    pub fn from_seeds(seeds: &[Vec<u8>]) -> Result<Self, String> {
        if seeds.is_empty() {
            return Err("at least one webhook signing key is needed".into());
        }
        let mut keys: Vec<SigningKey> = Vec::with_capacity(seeds.len());
        for (i, seed) in seeds.iter().enumerate() {
            let seed: &[u8; 32] = seed.as_slice().try_into().map_err(|_| {
                format!(
                    "webhook signing key {} must be exactly 32 bytes (an Ed25519 seed)",
                    i + 1
                )
            })?;
            let key = SigningKey::from_bytes(seed);
            if keys
                .iter()
                .any(|k| k.verifying_key() == key.verifying_key())
            {
                return Err(format!(
                    "webhook signing key {} repeats an earlier one",
                    i + 1
                ));
            }
            keys.push(key);
        }
        Ok(Self { keys })
    }

    /// The `webhook-signature` value: one `v1a,` entry per key, current first.
    pub fn sign(&self, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
        let content = signed_content(msg_id, &timestamp.to_string(), body);
        self.keys
            .iter()
            .map(|k| format!("{V1A}{}", STANDARD.encode(k.sign(&content).to_bytes())))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A stable key id: the first 8 bytes of the SHA-256 of the public key, base64url.
    pub fn key_id(public: &VerifyingKey) -> String {
        URL_SAFE_NO_PAD.encode(&Sha256::digest(public.as_bytes())[..8])
    }

    /// Every public key, current first.
    pub fn public_keys(&self) -> Vec<WebhookPublicKey> {
        self.keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let key = k.verifying_key();
                WebhookPublicKey {
                    kid: Self::key_id(&key),
                    key,
                    current: i == 0,
                }
            })
            .collect()
    }

    /// The published key set (RFC 7517, Ed25519 keys as RFC 8037 `OKP`), current first.
    pub fn jwks(&self) -> serde_json::Value {
        let keys: Vec<serde_json::Value> = self
            .public_keys()
            .iter()
            .map(|k| {
                json!({
                    "kty": "OKP",
                    "crv": "Ed25519",
                    "x": k.x(),
                    "kid": k.kid,
                    "use": "sig",
                    "alg": "EdDSA",
                })
            })
            .collect();
        json!({ "keys": keys })
    }
}

impl fmt::Debug for WebhookSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Key ids only: the private halves never reach a log line.
        let kids: Vec<String> = self.public_keys().into_iter().map(|k| k.kid).collect();
        f.debug_struct("WebhookSigner")
            .field("kids", &kids)
            .finish_non_exhaustive()
    }
}

/// The Ed25519 signature keys of a JWKS (the other keys are skipped); an error when there is
/// none, or when a key that claims to be Ed25519 is malformed.
pub fn parse_jwks(jwks: &serde_json::Value) -> Result<Vec<VerifyingKey>, String> {
    let entries = jwks["keys"]
        .as_array()
        .ok_or("the key set has no \"keys\" array")?;
    let mut keys = Vec::new();
    for entry in entries {
        if entry["kty"] != "OKP" || entry["crv"] != "Ed25519" {
            continue;
        }
        if entry.get("use").is_some_and(|u| u != "sig") {
            continue;
        }
        let key = entry["x"]
            .as_str()
            .and_then(|x| URL_SAFE_NO_PAD.decode(x).ok())
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .and_then(|b| VerifyingKey::from_bytes(&b).ok())
            .ok_or("an Ed25519 key's \"x\" is not base64url of 32 bytes")?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err("the key set has no Ed25519 signature key".into());
    }
    Ok(keys)
}

/// Why a webhook was refused. Holds nothing from the request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookVerifyError {
    #[error("webhook-id is empty")]
    MissingId,
    #[error("webhook-timestamp must be Unix seconds")]
    InvalidTimestamp,
    #[error("webhook-timestamp is more than {0} s from this clock")]
    Stale(i64),
    #[error("webhook-signature has no v1a entry")]
    NoSignature,
    #[error("no v1a signature verifies with a known key")]
    NoMatch,
}

/// Verifies a webhook: the timestamp within `tolerance_secs` of `now` (Unix seconds), then any
/// `v1a,` entry that verifies (strictly) with any of `keys` over the exact signed content.
/// Entries of other versions are ignored, as the standard asks; malformed `v1a` entries are
/// skipped, so one bad entry cannot hide a good one.
pub fn verify_webhook(
    msg_id: &str,
    timestamp: &str,
    signature_header: &str,
    body: &[u8],
    keys: &[VerifyingKey],
    now: i64,
    tolerance_secs: i64,
) -> Result<(), WebhookVerifyError> {
    if msg_id.is_empty() {
        return Err(WebhookVerifyError::MissingId);
    }
    let sent = timestamp
        .parse::<i64>()
        .ok()
        .filter(|_| !timestamp.is_empty() && timestamp.bytes().all(|b| b.is_ascii_digit()))
        .ok_or(WebhookVerifyError::InvalidTimestamp)?;
    if now.abs_diff(sent) > tolerance_secs.unsigned_abs() {
        return Err(WebhookVerifyError::Stale(tolerance_secs));
    }
    let signatures: Vec<Signature> = signature_header
        .split(' ')
        .take(MAX_ENTRIES)
        .filter_map(|entry| entry.strip_prefix(V1A))
        // 64 bytes are 88 base64 characters: checked before decoding.
        .filter(|b64| b64.len() == 88)
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .filter_map(|bytes| <[u8; 64]>::try_from(bytes).ok())
        .map(|bytes| Signature::from_bytes(&bytes))
        .collect();
    if signatures.is_empty() {
        return Err(WebhookVerifyError::NoSignature);
    }
    let content = signed_content(msg_id, timestamp, body);
    let verified = signatures.iter().any(|signature| {
        keys.iter()
            .any(|key| key.verify_strict(&content, signature).is_ok())
    });
    if verified {
        Ok(())
    } else {
        Err(WebhookVerifyError::NoMatch)
    }
}

/// The `type` of a command dispatch.
pub const DISPATCH_EVENT_TYPE: &str = "runner_command.dispatched";

/// The body of a command dispatch to a runner: what the dispatcher serialises and runners parse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DispatchPayload {
    /// [`DISPATCH_EVENT_TYPE`].
    #[serde(rename = "type")]
    pub event_type: String,
    pub timestamp: Timestamp,
    pub data: DispatchData,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DispatchData {
    pub delivery_id: Uuid,
    pub command_id: Uuid,
    pub workspace_id: Uuid,
    pub pool_id: Uuid,
    pub runner_id: Uuid,
    pub command: String,
    pub args: Vec<String>,
    pub environment_id: Option<Uuid>,
    pub timeout_seconds: i32,
    pub deadline_at: Timestamp,
    /// 1 for the first delivery attempt; the `webhook-id` stays the same across attempts.
    pub attempt: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn signer(seeds: &[u8]) -> WebhookSigner {
        WebhookSigner::from_seeds(&seeds.iter().map(|s| vec![*s; 32]).collect::<Vec<_>>()).unwrap()
    }

    fn keys_of(signer: &WebhookSigner) -> Vec<VerifyingKey> {
        signer.public_keys().into_iter().map(|k| k.key).collect()
    }

    fn verify(header: &str, id: &str, ts: &str, body: &[u8], keys: &[VerifyingKey]) -> bool {
        verify_webhook(id, ts, header, body, keys, NOW, WEBHOOK_TOLERANCE_SECS).is_ok()
    }

    #[test]
    fn a_signature_verifies_with_the_published_key() {
        let signer = signer(&[1]);
        let header = signer.sign("msg_1", NOW, b"{\"a\":1}");
        assert!(header.starts_with("v1a,"));
        assert_eq!(header.split(' ').count(), 1);
        assert!(verify(
            &header,
            "msg_1",
            "1700000000",
            b"{\"a\":1}",
            &keys_of(&signer)
        ));
        // Through the published key set, as runners read it.
        let published = parse_jwks(&signer.jwks()).unwrap();
        assert!(verify(
            &header,
            "msg_1",
            "1700000000",
            b"{\"a\":1}",
            &published
        ));
    }

    #[test]
    fn during_rotation_both_keys_sign_and_either_verifies() {
        let (new, old) = (signer(&[2]), signer(&[1]));
        let both = signer(&[2, 1]);
        let header = both.sign("msg_r", NOW, b"body");
        assert_eq!(header.split(' ').count(), 2);
        for keys in [keys_of(&old), keys_of(&new)] {
            assert!(verify(&header, "msg_r", "1700000000", b"body", &keys));
        }
        let public = both.public_keys();
        assert!(public[0].current && !public[1].current);
        assert_eq!(public[0].kid, new.public_keys()[0].kid);
        assert_eq!(both.jwks()["keys"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn tampering_refuses() {
        let signer = signer(&[3]);
        let keys = keys_of(&signer);
        let header = signer.sign("msg_t", NOW, b"body");
        assert!(!verify(&header, "msg_t", "1700000000", b"bodY", &keys));
        assert!(!verify(&header, "msg_u", "1700000000", b"body", &keys));
        assert!(!verify(&header, "msg_t", "1700000001", b"body", &keys));
        assert!(!verify(
            &header,
            "msg_t",
            "1700000000",
            b"body",
            &keys_of(&signer_of(4))
        ));
    }

    fn signer_of(seed: u8) -> WebhookSigner {
        signer(&[seed])
    }

    #[test]
    fn a_stale_or_malformed_timestamp_refuses() {
        let signer = signer(&[5]);
        let keys = keys_of(&signer);
        let old = NOW - WEBHOOK_TOLERANCE_SECS - 1;
        let header = signer.sign("m", old, b"");
        assert_eq!(
            verify_webhook("m", &old.to_string(), &header, b"", &keys, NOW, 300),
            Err(WebhookVerifyError::Stale(300))
        );
        let future = NOW + WEBHOOK_TOLERANCE_SECS + 1;
        let header = signer.sign("m", future, b"");
        assert!(!verify(&header, "m", &future.to_string(), b"", &keys));
        for ts in ["", "-1", "+1700000000", "1.5", "x"] {
            assert_eq!(
                verify_webhook("m", ts, &header, b"", &keys, NOW, 300),
                Err(WebhookVerifyError::InvalidTimestamp),
                "{ts}"
            );
        }
        assert_eq!(
            verify_webhook("", "1700000000", &header, b"", &keys, NOW, 300),
            Err(WebhookVerifyError::MissingId)
        );
    }

    #[test]
    fn garbage_and_unknown_entries_are_skipped() {
        let signer = signer(&[6]);
        let keys = keys_of(&signer);
        let good = signer.sign("g", NOW, b"x");
        let header = format!(
            "v1,abc v2a,{} v1a,!!!notbase64 v1a,AAAA {good} v1a,",
            &good[4..]
        );
        assert!(verify(&header, "g", "1700000000", b"x", &keys));
        for bad in ["", "   ", "v1,abc", "v1a,", "v1a,AAAA", "garbage"] {
            assert_eq!(
                verify_webhook("g", "1700000000", bad, b"x", &keys, NOW, 300),
                Err(WebhookVerifyError::NoSignature),
                "{bad:?}"
            );
        }
        // A well-formed entry that does not verify.
        let zeros = format!("v1a,{}", STANDARD.encode([0u8; 64]));
        assert_eq!(
            verify_webhook("g", "1700000000", &zeros, b"x", &keys, NOW, 300),
            Err(WebhookVerifyError::NoMatch)
        );
    }

    #[test]
    fn constructor_errors_and_debug_hold_no_key_material() {
        let seed = vec![7u8; 31];
        let err = WebhookSigner::from_seeds(&[seed]).unwrap_err();
        assert!(err.contains("32 bytes"), "{err}");
        assert!(WebhookSigner::from_seeds(&[]).is_err());
        let err = WebhookSigner::from_seeds(&[vec![7; 32], vec![7; 32]]).unwrap_err();
        assert!(err.contains("repeats"), "{err}");
        let signer = signer(&[7]);
        let debug = format!("{signer:?}");
        assert!(debug.contains(&signer.public_keys()[0].kid), "{debug}");
        assert!(!debug.contains(&STANDARD.encode([7u8; 32])), "{debug}");
        assert!(!debug.contains("[7, 7"), "{debug}");
    }

    #[test]
    fn key_forms() {
        let public = signer(&[8]).public_keys().remove(0);
        assert_eq!(public.kid.len(), 11, "8 bytes in base64url");
        assert_eq!(public.kid, WebhookSigner::key_id(&public.key));
        assert!(public.whpk().starts_with("whpk_"));
        assert_eq!(
            STANDARD.decode(&public.whpk()[5..]).unwrap(),
            URL_SAFE_NO_PAD.decode(public.x()).unwrap()
        );
        let jwk = &signer(&[8]).jwks()["keys"][0];
        assert_eq!(jwk["kty"], "OKP");
        assert_eq!(jwk["crv"], "Ed25519");
        assert_eq!(jwk["alg"], "EdDSA");
        assert_eq!(jwk["use"], "sig");
        assert_eq!(jwk["kid"], public.kid);
        assert_eq!(jwk["x"], public.x());
    }

    #[test]
    fn the_dispatch_payload_reads_the_documented_json() {
        let raw = r#"{"type":"runner_command.dispatched","timestamp":"2026-01-02T03:04:05.000000Z",
            "data":{"deliveryId":"00000000-0000-0000-0000-000000000001",
            "commandId":"00000000-0000-0000-0000-000000000002",
            "workspaceId":"00000000-0000-0000-0000-000000000003",
            "poolId":"00000000-0000-0000-0000-000000000004",
            "runnerId":"00000000-0000-0000-0000-000000000005",
            "command":"echo","args":["a","b"],"environmentId":null,"timeoutSeconds":60,
            "deadlineAt":"2026-01-02T03:05:05.000000Z","attempt":1}}"#;
        let payload: DispatchPayload = serde_json::from_str(raw).unwrap();
        assert_eq!(payload.event_type, DISPATCH_EVENT_TYPE);
        assert_eq!(payload.data.args, ["a", "b"]);
        assert_eq!(payload.data.environment_id, None);
        let back = serde_json::to_value(&payload).unwrap();
        assert_eq!(back["data"]["deadlineAt"], "2026-01-02T03:05:05.000000Z");
        assert_eq!(back["data"]["environmentId"], serde_json::Value::Null);
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(raw).unwrap()
        );
    }
}
