//! Audit proofs: signed heads and signed checkpoints of a workspace's hash chain.
//!
//! A signed head is the server's Ed25519 signature (its current webhook signing key, published
//! with its `kid` at `/.well-known/jwks.json`) over this message, every line ending in `\n`:
//!
//! ```text
//! cp-audit-head/v1
//! workspace=<uuid, lower-case hyphenated>
//! sequence=<decimal>
//! hash=<64 lower-case hex digits>
//! signed-at-ms=<Unix milliseconds, decimal>
//! kid=<key id>
//! ```
//!
//! A checkpoint (retention's: the chain starts again after `sequence`) signs:
//!
//! ```text
//! cp-audit-checkpoint/v1
//! workspace=<uuid>
//! sequence=<last sequence removed>
//! hash=<hex of that event's hash, or `none` for an event never hashed>
//! previous-sequence=<the previous checkpoint's sequence, 0 when none>
//! previous-hash=<its hash in hex, or `none`>
//! removed=<decimal>
//! signed-at-ms=<decimal>
//! kid=<key id>
//! ```
//!
//! The first line separates the two from each other and from a webhook: a webhook signature
//! covers `{webhook-id}.{timestamp}.{body}`, which holds two `.`, and neither message holds
//! any (uuids, decimals, hex and base64url key ids have none), so no signature of one kind
//! verifies as the other.

use std::fmt::Write as _;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use uuid::Uuid;

use super::webhook::WebhookSigner;

const HEAD_DOMAIN: &str = "cp-audit-head/v1";
const CHECKPOINT_DOMAIN: &str = "cp-audit-checkpoint/v1";

/// Lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Hex (either case) to bytes; `None` if it is not hex.
pub fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Who signed and how: the key id, when (Unix ms) and the 64-byte signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seal {
    pub kid: String,
    pub signed_at_ms: i64,
    pub signature: Vec<u8>,
}

/// A head of a workspace's chain with its seal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHead {
    pub workspace_id: Uuid,
    pub seq: i64,
    pub hash: Vec<u8>,
    pub seal: Seal,
}

/// What a checkpoint's seal covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointClaim {
    pub workspace_id: Uuid,
    pub last_seq: i64,
    /// None: the removed events were never hashed (written before the chain began).
    pub hash: Option<Vec<u8>>,
    pub prev_seq: i64,
    pub prev_hash: Option<Vec<u8>>,
    pub removed: i64,
}

fn head_message(workspace_id: Uuid, seq: i64, hash: &[u8], at_ms: i64, kid: &str) -> Vec<u8> {
    format!(
        "{HEAD_DOMAIN}\nworkspace={workspace_id}\nsequence={seq}\nhash={}\nsigned-at-ms={at_ms}\nkid={kid}\n",
        to_hex(hash)
    )
    .into_bytes()
}

fn checkpoint_message(c: &CheckpointClaim, at_ms: i64, kid: &str) -> Vec<u8> {
    let prev = c.prev_hash.as_deref().map_or("none".to_owned(), to_hex);
    let hash = c.hash.as_deref().map_or("none".to_owned(), to_hex);
    format!(
        "{CHECKPOINT_DOMAIN}\nworkspace={}\nsequence={}\nhash={hash}\nprevious-sequence={}\nprevious-hash={prev}\nremoved={}\nsigned-at-ms={at_ms}\nkid={kid}\n",
        c.workspace_id,
        c.last_seq,
        c.prev_seq,
        c.removed
    )
    .into_bytes()
}

/// Seals `message(at_ms, kid)` with the signer's current key.
fn seal(signer: &WebhookSigner, message: impl FnOnce(i64, &str) -> Vec<u8>, at_ms: i64) -> Seal {
    let key: &SigningKey = signer.current();
    let kid = WebhookSigner::key_id(&key.verifying_key());
    let signature = key.sign(&message(at_ms, &kid)).to_bytes().to_vec();
    Seal {
        kid,
        signed_at_ms: at_ms,
        signature,
    }
}

/// Seals the head (`workspace_id`, `seq`, `hash`) at `at_ms`.
pub fn sign_head(
    signer: &WebhookSigner,
    workspace_id: Uuid,
    seq: i64,
    hash: &[u8],
    at_ms: i64,
) -> SignedHead {
    let seal = seal(
        signer,
        |at, kid| head_message(workspace_id, seq, hash, at, kid),
        at_ms,
    );
    SignedHead {
        workspace_id,
        seq,
        hash: hash.to_vec(),
        seal,
    }
}

/// Seals a checkpoint's claim at `at_ms`.
pub fn sign_checkpoint(signer: &WebhookSigner, claim: &CheckpointClaim, at_ms: i64) -> Seal {
    seal(signer, |at, kid| checkpoint_message(claim, at, kid), at_ms)
}

/// The public keys a verifier trusts, by key id.
#[derive(Debug, Clone, Default)]
pub struct ProofKeys(Vec<(String, VerifyingKey)>);

impl ProofKeys {
    pub fn new(keys: impl IntoIterator<Item = VerifyingKey>) -> Self {
        Self(
            keys.into_iter()
                .map(|k| (WebhookSigner::key_id(&k), k))
                .collect(),
        )
    }

    fn verifies(&self, seal: &Seal, message: &[u8]) -> bool {
        let Ok(bytes) = <[u8; 64]>::try_from(seal.signature.as_slice()) else {
            return false;
        };
        let signature = Signature::from_bytes(&bytes);
        self.0
            .iter()
            .filter(|(kid, _)| *kid == seal.kid)
            .any(|(_, key)| key.verify_strict(message, &signature).is_ok())
    }

    /// The same keys and `extra` ones (verification only: an old key dropped by a rotation).
    pub fn with(mut self, extra: impl IntoIterator<Item = VerifyingKey>) -> Self {
        for k in extra {
            let kid = WebhookSigner::key_id(&k);
            if !self.0.iter().any(|(known, _)| *known == kid) {
                self.0.push((kid, k));
            }
        }
        self
    }

    /// Whether a key of this id is trusted.
    pub fn knows(&self, kid: &str) -> bool {
        self.0.iter().any(|(known, _)| known == kid)
    }

    /// Whether a head's seal verifies with a trusted key of its `kid`.
    pub fn verifies_head(&self, head: &SignedHead) -> bool {
        let message = head_message(
            head.workspace_id,
            head.seq,
            &head.hash,
            head.seal.signed_at_ms,
            &head.seal.kid,
        );
        self.verifies(&head.seal, &message)
    }

    /// Whether a checkpoint's seal verifies with a trusted key of its `kid`.
    pub fn verifies_checkpoint(&self, claim: &CheckpointClaim, seal: &Seal) -> bool {
        self.verifies(
            seal,
            &checkpoint_message(claim, seal.signed_at_ms, &seal.kid),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> WebhookSigner {
        WebhookSigner::from_seeds(&[vec![7; 32]]).unwrap()
    }

    #[test]
    fn a_head_verifies_and_any_changed_field_does_not() {
        let s = signer();
        let keys = ProofKeys::new(s.public_keys().into_iter().map(|k| k.key));
        let ws = Uuid::new_v4();
        let head = sign_head(&s, ws, 5, &[1; 32], 1_700_000_000_000);
        assert!(keys.verifies_head(&head));
        for changed in [
            SignedHead {
                seq: 4,
                ..head.clone()
            },
            SignedHead {
                hash: vec![2; 32],
                ..head.clone()
            },
            SignedHead {
                workspace_id: Uuid::new_v4(),
                ..head.clone()
            },
        ] {
            assert!(!keys.verifies_head(&changed));
        }
        let other = WebhookSigner::from_seeds(&[vec![8; 32]]).unwrap();
        let other_keys = ProofKeys::new(other.public_keys().into_iter().map(|k| k.key));
        assert!(!other_keys.verifies_head(&head));
    }

    #[test]
    fn the_messages_hold_no_dot_so_none_is_a_webhook_content() {
        let kid = signer().public_keys()[0].kid.clone();
        let m = head_message(Uuid::new_v4(), 12, &[0xab; 32], 1, &kid);
        assert!(!m.contains(&b'.'));
        let claim = CheckpointClaim {
            workspace_id: Uuid::new_v4(),
            last_seq: 3,
            hash: Some(vec![1; 32]),
            prev_seq: 0,
            prev_hash: None,
            removed: 3,
        };
        assert!(!checkpoint_message(&claim, 1, &kid).contains(&b'.'));
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(to_hex(&[0, 0xff, 0x10]), "00ff10");
        assert_eq!(from_hex("00FF10"), Some(vec![0, 0xff, 0x10]));
        assert_eq!(from_hex("0g"), None);
        assert_eq!(from_hex("abc"), None);
    }
}
