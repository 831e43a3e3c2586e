//! The key-encryption key (KEK): every key the server generates is wrapped with it before it is
//! stored in `settings`, so the records store alone (a copy, a backup, a replica, a reporting
//! role) holds no usable key. The KEK itself lives outside the records store (a variable, or an
//! owner-only file beside the embedded store). A wrapped value is `wrapped-v1:` and the base64
//! of an XChaCha20-Poly1305 box whose associated data is the setting's name, so a wrapped key
//! cannot be moved to another setting.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::RecordCipher;

const PREFIX: &str = "wrapped-v1:";

pub struct KeyEncryptionKey(RecordCipher);

impl fmt::Debug for KeyEncryptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyEncryptionKey(redacted)")
    }
}

/// A wrapped key that does not open: another KEK wrapped it, or it was altered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the key was wrapped with another key-encryption key")]
pub struct ForeignWrap;

impl KeyEncryptionKey {
    /// From the base64 of 32 bytes. The error never echoes the input.
    pub fn from_base64(text: &str) -> Result<Self, String> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| "the key-encryption key is not valid base64".to_owned())?;
        if bytes.len() != 32 {
            return Err("the key-encryption key must be 32 bytes".into());
        }
        RecordCipher::new(&[bytes]).map(Self)
    }

    /// A new random key and its base64, for a key file.
    pub fn generate() -> (Self, String) {
        let text = STANDARD.encode(rand::random::<[u8; 32]>());
        let key = Self::from_base64(&text).expect("32 random bytes make a key");
        (key, text)
    }

    /// The stored form of `key`, kept under the setting `name`.
    pub fn wrap(&self, name: &str, key: &[u8]) -> String {
        format!(
            "{PREFIX}{}",
            STANDARD.encode(self.0.seal(key, name.as_bytes()))
        )
    }

    /// The key kept under `name`: `Ok(None)` when `stored` is not wrapped (kept in the clear
    /// by an earlier version).
    pub fn unwrap(&self, name: &str, stored: &str) -> Result<Option<Vec<u8>>, ForeignWrap> {
        let Some(b64) = stored.trim().strip_prefix(PREFIX) else {
            return Ok(None);
        };
        let sealed = STANDARD.decode(b64).map_err(|_| ForeignWrap)?;
        self.0
            .open(&sealed, name.as_bytes())
            .map(Some)
            .map_err(|_| ForeignWrap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_key_opens_only_with_its_kek_under_its_name() {
        let (kek, text) = KeyEncryptionKey::generate();
        let wrapped = kek.wrap("token_hash_key", b"0123456789abcdef0123456789abcdef");
        assert!(wrapped.starts_with("wrapped-v1:"));
        assert!(!wrapped.contains("0123456789"));
        let again = KeyEncryptionKey::from_base64(&text).unwrap();
        assert_eq!(
            again.unwrap("token_hash_key", &wrapped).unwrap().as_deref(),
            Some(&b"0123456789abcdef0123456789abcdef"[..])
        );
        assert_eq!(again.unwrap("other_key", &wrapped), Err(ForeignWrap));
        let (stranger, _) = KeyEncryptionKey::generate();
        assert_eq!(
            stranger.unwrap("token_hash_key", &wrapped),
            Err(ForeignWrap)
        );
        assert_eq!(kek.unwrap("token_hash_key", "c2VjcmV0"), Ok(None), "plain");
        assert_eq!(
            kek.unwrap("token_hash_key", "wrapped-v1:!!"),
            Err(ForeignWrap)
        );
    }

    #[test]
    fn errors_and_debug_hold_no_key() {
        let err = KeyEncryptionKey::from_base64("c2VjcmV0").unwrap_err();
        assert!(!err.contains("c2VjcmV0"), "{err}");
        assert!(KeyEncryptionKey::from_base64("not base64!").is_err());
        let (kek, text) = KeyEncryptionKey::generate();
        assert!(!format!("{kek:?}").contains(&text));
    }
}
