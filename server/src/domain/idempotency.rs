//! Idempotency keys and the encryption of stored responses.

use std::fmt;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// An `Idempotency-Key`: 16 to 200 characters of `[A-Za-z0-9._:-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const LENGTH: (usize, usize) = (16, 200);

    pub fn parse(raw: &str) -> Result<Self, String> {
        let valid = |bytes: &[u8]| bytes.iter().all(|&b| super::ids::is_key_char(b));
        let pattern = "^[A-Za-z0-9._:-]+$";
        super::ids::key_text(raw, Self::LENGTH, valid, pattern).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

const VERSION: u8 = 1;
const KEY_ID_LEN: usize = 4;
const NONCE_LEN: usize = 24;

/// Encrypts stored responses (XChaCha20-Poly1305, random nonces). The first key encrypts; every
/// key decrypts, so keys rotate by putting a new one first and dropping the old one a day later.
#[derive(Clone)]
pub struct RecordCipher {
    keys: Vec<([u8; KEY_ID_LEN], XChaCha20Poly1305)>,
}

impl fmt::Debug for RecordCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecordCipher({} keys, redacted)", self.keys.len())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the record cannot be decrypted with any configured key")]
pub struct UndecryptableRecord;

impl RecordCipher {
    /// `keys` are raw 32-byte keys, the encrypting one first.
    pub fn new(keys: &[Vec<u8>]) -> Result<Self, String> {
        if keys.is_empty() {
            return Err("at least one idempotency encryption key is needed".into());
        }
        let keys = keys
            .iter()
            .map(|k| {
                let cipher = XChaCha20Poly1305::new_from_slice(k).map_err(|_| {
                    "an idempotency encryption key must be exactly 32 bytes".to_owned()
                })?;
                let digest = Sha256::digest(k);
                let mut id = [0u8; KEY_ID_LEN];
                id.copy_from_slice(&digest[..KEY_ID_LEN]);
                Ok((id, cipher))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self { keys })
    }

    /// `aad` binds the ciphertext to where it is stored, so a record cannot be moved to another
    /// principal's key and replayed there.
    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Vec<u8> {
        let (id, cipher) = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let sealed = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .unwrap_or_default();
        let mut out = Vec::with_capacity(1 + KEY_ID_LEN + NONCE_LEN + sealed.len());
        out.push(VERSION);
        out.extend_from_slice(id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    pub fn open(&self, record: &[u8], aad: &[u8]) -> Result<Vec<u8>, UndecryptableRecord> {
        if record.len() < 1 + KEY_ID_LEN + NONCE_LEN || record[0] != VERSION {
            return Err(UndecryptableRecord);
        }
        let id = &record[1..1 + KEY_ID_LEN];
        let nonce = XNonce::from_slice(&record[1 + KEY_ID_LEN..1 + KEY_ID_LEN + NONCE_LEN]);
        let sealed = &record[1 + KEY_ID_LEN + NONCE_LEN..];
        let (_, cipher) = self
            .keys
            .iter()
            .find(|(k, _)| k == id)
            .ok_or(UndecryptableRecord)?;
        cipher
            .decrypt(nonce, Payload { msg: sealed, aad })
            .map_err(|_| UndecryptableRecord)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_boundaries() {
        assert!(IdempotencyKey::parse(&"a".repeat(16)).is_ok());
        assert!(IdempotencyKey::parse(&"a".repeat(200)).is_ok());
        assert!(IdempotencyKey::parse(&"a".repeat(15)).is_err());
        assert!(IdempotencyKey::parse(&"a".repeat(201)).is_err());
        assert!(IdempotencyKey::parse("order-2026:11.22_x").is_ok());
        assert!(IdempotencyKey::parse("has space in the key").is_err());
        assert!(IdempotencyKey::parse("slash/is/not/allowed").is_err());
    }

    #[test]
    fn records_round_trip_rotate_and_bind_to_their_place() {
        let old = RecordCipher::new(&[vec![1; 32]]).unwrap();
        let rotated = RecordCipher::new(&[vec![2; 32], vec![1; 32]]).unwrap();
        let sealed = old.seal(b"secret body", b"place");
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(rotated.open(&sealed, b"place").unwrap(), b"secret body");
        assert_eq!(
            rotated.open(&sealed, b"elsewhere"),
            Err(UndecryptableRecord)
        );
        let new = rotated.seal(b"x", b"p");
        assert_eq!(
            old.open(&new, b"p"),
            Err(UndecryptableRecord),
            "the old key alone cannot read new records"
        );
        assert!(RecordCipher::new(&[vec![0; 31]]).is_err());
    }
}
