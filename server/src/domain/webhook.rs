//! Outgoing webhooks to runners, signed as Standard Webhooks (https://www.standardwebhooks.com):
//! `webhook-id`, `webhook-timestamp` and `webhook-signature`, whose space-separated entries sign
//! `{webhook-id}.{webhook-timestamp}.{body}` (the exact bytes). `v1,` entries are HMAC-SHA256
//! with the receiving runner's own secret ([`RunnerSecret`]); `v1a,` entries are Ed25519 with the
//! control plane's keys (`--webhook-signing-keys`), published as a JWKS. A signature says who
//! sent a dispatch, not whom it is for: [`verify_webhook`](super::verify_webhook) also checks that the dispatch names
//! the runner verifying it, so a dispatch captured at one runner is refused at every other.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::webhook_secret::{RunnerSecret, V1};

pub const WEBHOOK_ID_HEADER: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub const WEBHOOK_SIGNATURE_HEADER: &str = "webhook-signature";

/// A cursor naming a webhook signing key ([`WebhookSigner::is_key_id`]), or empty (the same
/// as absent). The document states it as written.
pub const KEY_ID_CURSOR_PATTERN: &str = "^([A-Za-z0-9_-]{11})?$";

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

/// A control-plane key from its `whpk_…` form, as a runner pins it.
pub fn parse_whpk(text: &str) -> Result<VerifyingKey, String> {
    text.trim()
        .strip_prefix(PUBLIC_KEY_PREFIX)
        .and_then(|b64| STANDARD.decode(b64).ok())
        .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
        .and_then(|bytes| VerifyingKey::from_bytes(&bytes).ok())
        .ok_or_else(|| "a control-plane key is whpk_ and base64 of a 32-byte Ed25519 key".into())
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

    /// The `webhook-signature` value: one `v1,` entry per secret of the receiving runner (two
    /// during a rotation's overlap), then one `v1a,` entry per key, current first.
    pub fn sign(
        &self,
        msg_id: &str,
        timestamp: i64,
        body: &[u8],
        runner_secrets: &[RunnerSecret],
    ) -> String {
        let content = signed_content(msg_id, &timestamp.to_string(), body);
        let symmetric = runner_secrets.iter().map(|s| s.sign(&content));
        let asymmetric = self
            .keys
            .iter()
            .map(|k| format!("{V1A}{}", STANDARD.encode(k.sign(&content).to_bytes())));
        symmetric.chain(asymmetric).collect::<Vec<_>>().join(" ")
    }

    /// The current key (the first configured): audit proofs are signed with it alone.
    pub fn current(&self) -> &SigningKey {
        &self.keys[0]
    }

    /// A stable key id: the first 8 bytes of the SHA-256 of the public key, base64url.
    pub fn key_id(public: &VerifyingKey) -> String {
        URL_SAFE_NO_PAD.encode(&Sha256::digest(public.as_bytes())[..8])
    }

    /// Whether `raw` has the form [`Self::key_id`] writes: 8 bytes, base64url unpadded, so
    /// 11 of `[A-Za-z0-9_-]` ([`KEY_ID_CURSOR_PATTERN`]).
    pub fn is_key_id(raw: &str) -> bool {
        raw.len() == 11
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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
    #[error("webhook-signature has no v1 or v1a entry")]
    NoSignature,
    #[error("no signature verifies with a known key or secret")]
    NoMatch,
    #[error("the body is not a command dispatch")]
    NotADispatch,
    #[error("the dispatch is for another runner")]
    OtherRunner,
}

/// A webhook as received: its three headers and the exact body.
#[derive(Debug, Clone, Copy)]
pub struct ReceivedWebhook<'a> {
    pub id: &'a str,
    pub timestamp: &'a str,
    pub signature: &'a str,
    pub body: &'a [u8],
}

/// What a receiver verifies with: the control plane's published keys (`v1a`), its own
/// secrets (`v1`; two during a rotation's overlap), or both.
#[derive(Debug, Clone, Default)]
pub struct WebhookKeys {
    pub published: Vec<VerifyingKey>,
    pub secrets: Vec<RunnerSecret>,
}

/// Verifies a webhook's signature: the timestamp within `tolerance_secs` of `now` (Unix
/// seconds), then any `v1,` entry that matches one of the secrets or any `v1a,` entry that
/// verifies (strictly) with one of the published keys, over the exact signed content. Entries of
/// other versions are ignored, as the standard asks; malformed entries are skipped, so one bad
/// entry cannot hide a good one. It does not say whom the webhook is for: see
/// [`verify_webhook`](super::verify_webhook).
pub fn verify_signature(
    webhook: &ReceivedWebhook<'_>,
    keys: &WebhookKeys,
    now: i64,
    tolerance_secs: i64,
) -> Result<(), WebhookVerifyError> {
    let ReceivedWebhook {
        id,
        timestamp,
        signature,
        body,
    } = *webhook;
    if id.is_empty() {
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
    let entries: Vec<&str> = signature.split(' ').take(MAX_ENTRIES).collect();
    let symmetric: Vec<&str> = entries.iter().filter_map(|e| e.strip_prefix(V1)).collect();
    let asymmetric: Vec<Signature> = entries
        .iter()
        .filter_map(|entry| entry.strip_prefix(V1A))
        // 64 bytes are 88 base64 characters: checked before decoding.
        .filter(|b64| b64.len() == 88)
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .filter_map(|bytes| <[u8; 64]>::try_from(bytes).ok())
        .map(|bytes| Signature::from_bytes(&bytes))
        .collect();
    if symmetric.is_empty() && asymmetric.is_empty() {
        return Err(WebhookVerifyError::NoSignature);
    }
    let content = signed_content(id, timestamp, body);
    let by_secret = symmetric
        .iter()
        .any(|b64| keys.secrets.iter().any(|s| s.verifies(&content, b64)));
    let by_key = || {
        asymmetric.iter().any(|signature| {
            keys.published
                .iter()
                .any(|key| key.verify_strict(&content, signature).is_ok())
        })
    };
    if by_secret || by_key() {
        Ok(())
    } else {
        Err(WebhookVerifyError::NoMatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn signer(seeds: &[u8]) -> WebhookSigner {
        WebhookSigner::from_seeds(&seeds.iter().map(|s| vec![*s; 32]).collect::<Vec<_>>()).unwrap()
    }

    fn keys_of(signer: &WebhookSigner) -> WebhookKeys {
        published(signer.public_keys().into_iter().map(|k| k.key).collect())
    }

    fn published(keys: Vec<VerifyingKey>) -> WebhookKeys {
        WebhookKeys {
            published: keys,
            secrets: vec![],
        }
    }

    fn check(
        id: &str,
        ts: &str,
        header: &str,
        body: &[u8],
        keys: &WebhookKeys,
    ) -> Result<(), WebhookVerifyError> {
        let webhook = ReceivedWebhook {
            id,
            timestamp: ts,
            signature: header,
            body,
        };
        verify_signature(&webhook, keys, NOW, WEBHOOK_TOLERANCE_SECS)
    }

    fn verify(header: &str, id: &str, ts: &str, body: &[u8], keys: &WebhookKeys) -> bool {
        check(id, ts, header, body, keys).is_ok()
    }

    #[test]
    fn a_signature_verifies_with_the_published_key() {
        let signer = signer(&[1]);
        let header = signer.sign("msg_1", NOW, b"{\"a\":1}", &[]);
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
        let from_jwks = parse_jwks(&signer.jwks()).unwrap();
        assert!(verify(
            &header,
            "msg_1",
            "1700000000",
            b"{\"a\":1}",
            &published(from_jwks)
        ));
    }

    #[test]
    fn during_rotation_both_keys_sign_and_either_verifies() {
        let (new, old) = (signer(&[2]), signer(&[1]));
        let both = signer(&[2, 1]);
        let header = both.sign("msg_r", NOW, b"body", &[]);
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
        let header = signer.sign("msg_t", NOW, b"body", &[]);
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
        let header = signer.sign("m", old, b"", &[]);
        assert_eq!(
            check("m", &old.to_string(), &header, b"", &keys),
            Err(WebhookVerifyError::Stale(300))
        );
        let future = NOW + WEBHOOK_TOLERANCE_SECS + 1;
        let header = signer.sign("m", future, b"", &[]);
        assert!(!verify(&header, "m", &future.to_string(), b"", &keys));
        for ts in ["", "-1", "+1700000000", "1.5", "x"] {
            assert_eq!(
                check("m", ts, &header, b"", &keys),
                Err(WebhookVerifyError::InvalidTimestamp),
                "{ts}"
            );
        }
        assert_eq!(
            check("", "1700000000", &header, b"", &keys),
            Err(WebhookVerifyError::MissingId)
        );
    }

    #[test]
    fn garbage_and_unknown_entries_are_skipped() {
        let signer = signer(&[6]);
        let keys = keys_of(&signer);
        let good = signer.sign("g", NOW, b"x", &[]);
        let header = format!(
            "v1,abc v2a,{} v1a,!!!notbase64 v1a,AAAA {good} v1a,",
            &good[4..]
        );
        assert!(verify(&header, "g", "1700000000", b"x", &keys));
        for bad in ["", "   ", "v1a,", "v1a,AAAA", "garbage", "v1b,abc"] {
            assert_eq!(
                check("g", "1700000000", bad, b"x", &keys),
                Err(WebhookVerifyError::NoSignature),
                "{bad:?}"
            );
        }
        // Well-formed entries that do not verify.
        let zeros = format!("v1a,{}", STANDARD.encode([0u8; 64]));
        for header in [zeros.as_str(), "v1,abc"] {
            assert_eq!(
                check("g", "1700000000", header, b"x", &keys),
                Err(WebhookVerifyError::NoMatch)
            );
        }
    }

    #[test]
    fn a_runner_secret_signs_v1_entries_beside_the_v1a_ones() {
        let signer = signer(&[9]);
        let (old, new) = (RunnerSecret::generate(), RunnerSecret::generate());
        let header = signer.sign("s", NOW, b"x", &[new.clone(), old.clone()]);
        let versions: Vec<&str> = header
            .split(' ')
            .map(|e| &e[..e.find(',').unwrap()])
            .collect();
        assert_eq!(versions, ["v1", "v1", "v1a"]);
        for secret in [old, new] {
            let keys = WebhookKeys {
                published: vec![],
                secrets: vec![secret],
            };
            assert!(verify(&header, "s", "1700000000", b"x", &keys));
            assert!(!verify(&header, "s", "1700000000", b"y", &keys));
        }
        let stranger = WebhookKeys {
            published: vec![],
            secrets: vec![RunnerSecret::generate()],
        };
        assert_eq!(
            check("s", "1700000000", &header, b"x", &stranger),
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
        assert_eq!(parse_whpk(&public.whpk()), Ok(public.key));
        assert!(parse_whpk(&public.x()).is_err());
        assert!(parse_whpk("whpk_AAAA").is_err());
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
}
