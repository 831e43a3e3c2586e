//! Personal access tokens: their name, lifetime and secret format.
//!
//! A secret reads `cpat_<public id>_<secret><checksum>`: the fixed prefix lets scanners recognise
//! a leaked token, the public id finds the stored record without a secret-derived index, and the
//! CRC32 checksum rejects a mistyped token before any lookup (as GitHub's tokens do).

use std::fmt;

use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::Sha256;
use subtle::ConstantTimeEq;

pub const TOKEN_PREFIX: &str = "cpat_";
const PUBLIC_ID_LEN: usize = 12;
const SECRET_LEN: usize = 32;
const CHECKSUM_LEN: usize = 6;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A token's name: 1 to 120 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenName(String);

impl TokenName {
    pub const MAX_CHARS: usize = 120;

    pub fn parse(raw: &str) -> Result<Self, String> {
        super::bounded_text(raw, Self::MAX_CHARS).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A token's lifetime in days: 1 to 90, 30 when not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiresInDays(u8);

impl ExpiresInDays {
    pub const MIN: i64 = 1;
    pub const MAX: i64 = 90;

    pub fn parse(days: i64) -> Result<Self, String> {
        super::bounded_integer(days, Self::MIN, Self::MAX).map(|days| Self(days as u8))
    }

    pub fn days(self) -> i64 {
        i64::from(self.0)
    }
}

impl Default for ExpiresInDays {
    fn default() -> Self {
        Self(30)
    }
}

/// Why a token's access was revoked: 1 to 500 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevocationReason(String);

impl RevocationReason {
    pub const MAX_CHARS: usize = 500;

    pub fn parse(raw: &str) -> Result<Self, String> {
        super::bounded_text(raw, Self::MAX_CHARS).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The non-secret identifier embedded in a token; the stored record is found by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PublicId(String);

impl PublicId {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `prefix` shown in listings and logs: identifies the token, reveals nothing secret.
    pub fn display_prefix(&self) -> String {
        format!("{TOKEN_PREFIX}{}", self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed token")]
pub struct MalformedToken;

/// A whole token secret. Its `Debug` is redacted so it cannot slip into a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret(String);

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(<redacted>)")
    }
}

impl TokenSecret {
    /// A fresh token from the operating system's random generator.
    pub fn generate() -> (PublicId, TokenSecret) {
        let mut rng = rand::rng();
        let mut pick = |len: usize| -> String {
            (0..len)
                .map(|_| BASE62[rng.random_range(0..BASE62.len())] as char)
                .collect()
        };
        let public_id = pick(PUBLIC_ID_LEN);
        let secret = pick(SECRET_LEN);
        let body = format!("{TOKEN_PREFIX}{public_id}_{secret}");
        let checksum = checksum(&body);
        (
            PublicId(public_id),
            TokenSecret(format!("{body}{checksum}")),
        )
    }

    /// Checks the shape and checksum; no lookup happens for a token that fails here.
    pub fn parse(raw: &str) -> Result<(PublicId, TokenSecret), MalformedToken> {
        let rest = raw.strip_prefix(TOKEN_PREFIX).ok_or(MalformedToken)?;
        let (public_id, tail) = rest.split_once('_').ok_or(MalformedToken)?;
        let well_formed = public_id.len() == PUBLIC_ID_LEN
            && tail.len() == SECRET_LEN + CHECKSUM_LEN
            && public_id
                .bytes()
                .chain(tail.bytes())
                .all(|b| b.is_ascii_alphanumeric());
        if !well_formed {
            return Err(MalformedToken);
        }
        let (body, given) = raw.split_at(raw.len() - CHECKSUM_LEN);
        if checksum(body).as_bytes().ct_eq(given.as_bytes()).into() {
            Ok((PublicId(public_id.to_owned()), TokenSecret(raw.to_owned())))
        } else {
            Err(MalformedToken)
        }
    }

    /// The secret itself: for the one response that hands it out, never for logs.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

fn checksum(body: &str) -> String {
    let mut value = crc32fast::hash(body.as_bytes());
    let mut out = [b'0'; CHECKSUM_LEN];
    for slot in out.iter_mut().rev() {
        *slot = BASE62[(value % 62) as usize];
        value /= 62;
    }
    out.iter().map(|&b| b as char).collect()
}

/// Keyed hash of token secrets (HMAC-SHA256): a stolen table of hashes is useless without the key.
#[derive(Clone)]
pub struct TokenHasher {
    key: Vec<u8>,
}

impl fmt::Debug for TokenHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenHasher(<key redacted>)")
    }
}

impl TokenHasher {
    pub const MIN_KEY_LEN: usize = 32;

    pub fn new(key: Vec<u8>) -> Result<Self, String> {
        if key.len() < Self::MIN_KEY_LEN {
            return Err(format!(
                "the token hashing key must be at least {} bytes",
                Self::MIN_KEY_LEN
            ));
        }
        Ok(Self { key })
    }

    /// Identifies the key without revealing it: HMAC of a fixed label, hex.
    pub fn fingerprint(&self) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(b"control-plane token hash key fingerprint v1");
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    pub fn hash(&self, secret: &TokenSecret) -> Vec<u8> {
        self.mac(secret).finalize().into_bytes().to_vec()
    }

    /// Constant-time comparison against a stored hash.
    pub fn verify(&self, secret: &TokenSecret, stored: &[u8]) -> bool {
        self.mac(secret).verify_slice(stored).is_ok()
    }

    fn mac(&self, secret: &TokenSecret) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(secret.expose().as_bytes());
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_parse_back() {
        let (public_id, secret) = TokenSecret::generate();
        let (parsed_id, parsed) = TokenSecret::parse(secret.expose()).expect("valid token");
        assert_eq!(parsed_id, public_id);
        assert_eq!(parsed, secret);
        assert!(secret.expose().starts_with(&public_id.display_prefix()));
    }

    #[test]
    fn a_typo_fails_the_checksum() {
        let (_, secret) = TokenSecret::generate();
        let mut raw = secret.expose().to_owned();
        let i = TOKEN_PREFIX.len() + PUBLIC_ID_LEN + 5;
        let replacement = if &raw[i..=i] == "a" { "b" } else { "a" };
        raw.replace_range(i..=i, replacement);
        assert_eq!(TokenSecret::parse(&raw), Err(MalformedToken));
        assert_eq!(TokenSecret::parse("cpat_short"), Err(MalformedToken));
        assert_eq!(TokenSecret::parse(""), Err(MalformedToken));
    }

    #[test]
    fn hashes_verify_only_with_the_same_key() {
        let (_, secret) = TokenSecret::generate();
        let a = TokenHasher::new(vec![1; 32]).unwrap();
        let b = TokenHasher::new(vec![2; 32]).unwrap();
        let stored = a.hash(&secret);
        assert!(a.verify(&secret, &stored));
        assert!(!b.verify(&secret, &stored));
        assert!(!a.verify(&secret, &stored[..31]));
        assert!(TokenHasher::new(vec![0; 31]).is_err());
    }

    #[test]
    fn debug_output_never_shows_the_secret() {
        let (_, secret) = TokenSecret::generate();
        assert!(!format!("{secret:?}").contains(secret.expose()));
    }

    #[test]
    fn boundaries() {
        assert!(TokenName::parse("").is_err());
        assert!(TokenName::parse(&"é".repeat(120)).is_ok());
        assert!(TokenName::parse(&"a".repeat(121)).is_err());
        assert!(ExpiresInDays::parse(0).is_err());
        assert!(ExpiresInDays::parse(1).is_ok());
        assert!(ExpiresInDays::parse(90).is_ok());
        assert!(ExpiresInDays::parse(91).is_err());
        assert!(RevocationReason::parse(&"r".repeat(500)).is_ok());
        assert!(RevocationReason::parse(&"r".repeat(501)).is_err());
    }
}
