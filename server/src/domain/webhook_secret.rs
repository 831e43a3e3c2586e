//! A runner's own Standard Webhooks secret (`whsec_` and the base64 of 32 random bytes) and
//! the symmetric `v1,` signature made with it: base64 of HMAC-SHA256 over
//! `{webhook-id}.{webhook-timestamp}.{body}`. Each runner has its own, so a dispatch captured
//! at one runner verifies at no other, with any Standard Webhooks or Svix library.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The version prefix of a symmetric (HMAC-SHA256) signature entry.
pub(super) const V1: &str = "v1,";
const SECRET_PREFIX: &str = "whsec_";
/// What the control plane generates.
const SECRET_BYTES: usize = 32;
/// What it accepts: Standard Webhooks asks for 24 to 64 bytes.
const ACCEPTED_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// A runner's webhook secret. Shown once, at registration or rotation; stored sealed.
#[derive(Clone, PartialEq, Eq)]
pub struct RunnerSecret(Vec<u8>);

impl fmt::Debug for RunnerSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunnerSecret(redacted)")
    }
}

impl RunnerSecret {
    pub fn generate() -> Self {
        Self(rand::random::<[u8; SECRET_BYTES]>().to_vec())
    }

    /// From its `whsec_…` form, as a runner holds it. The error never echoes the input.
    pub fn parse(text: &str) -> Result<Self, String> {
        let b64 = text
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .ok_or("a runner webhook secret starts with whsec_")?;
        Self::from_bytes(
            &STANDARD
                .decode(b64)
                .map_err(|_| "a runner webhook secret is whsec_ and base64".to_owned())?,
        )
    }

    /// From its raw bytes (as unsealed from the records store).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        if ACCEPTED_BYTES.contains(&bytes.len()) {
            Ok(Self(bytes.to_vec()))
        } else {
            Err("a runner webhook secret holds 24 to 64 bytes".to_owned())
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The `whsec_…` form runners configure.
    pub fn whsec(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(&self.0))
    }

    fn mac(&self, content: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .expect("HMAC-SHA256 takes a key of any length");
        mac.update(content);
        mac
    }

    /// One `v1,<base64>` entry over the signed content.
    pub(super) fn sign(&self, content: &[u8]) -> String {
        format!(
            "{V1}{}",
            STANDARD.encode(self.mac(content).finalize().into_bytes())
        )
    }

    /// Does the base64 signature (without `v1,`) match? Compared in constant time.
    pub(super) fn verifies(&self, content: &[u8], b64: &str) -> bool {
        // 32 bytes are 44 base64 characters: checked before decoding.
        b64.len() == 44
            && STANDARD
                .decode(b64)
                .is_ok_and(|tag| self.mac(content).verify_slice(&tag).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whsec_form_round_trips_and_errors_hold_no_input() {
        let secret = RunnerSecret::generate();
        let text = secret.whsec();
        assert!(text.starts_with("whsec_"));
        assert_eq!(RunnerSecret::parse(&text).unwrap(), secret);
        assert_ne!(RunnerSecret::generate(), secret);
        for bad in ["", "whsec_", "whsec_!!", "abc", &text[6..]] {
            let err = RunnerSecret::parse(bad).unwrap_err();
            assert!(bad.len() < 8 || !err.contains(bad), "{err}");
        }
        for len in [16, 23, 65] {
            let wrong = format!("whsec_{}", STANDARD.encode(vec![1u8; len]));
            assert!(RunnerSecret::parse(&wrong).is_err(), "{len}");
        }
        assert_eq!(secret.as_bytes().len(), 32);
        assert_eq!(format!("{secret:?}"), "RunnerSecret(redacted)");
    }

    #[test]
    fn a_v1_entry_verifies_only_with_its_secret_and_content() {
        let (a, b) = (RunnerSecret::generate(), RunnerSecret::generate());
        let entry = a.sign(b"id.1.body");
        let b64 = entry.strip_prefix(V1).unwrap();
        assert!(a.verifies(b"id.1.body", b64));
        assert!(!a.verifies(b"id.1.bodY", b64));
        assert!(!b.verifies(b"id.1.body", b64));
        assert!(!a.verifies(b"id.1.body", "AAAA"));
        assert!(!a.verifies(b"id.1.body", &"!".repeat(44)));
    }

    #[test]
    fn the_signature_is_the_standard_one() {
        // The example of the Standard Webhooks specification (a 24-byte secret).
        let secret = RunnerSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            secret.sign(b"msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{\"test\": 2432232314}"),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}
