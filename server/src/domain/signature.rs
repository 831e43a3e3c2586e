//! Runner request signatures (docs/design.md, "Runner signatures"): the headers, the exact signed
//! message, and signing for runner authors and tests. Verification against stored keys is the
//! service layer's (`service::runners`).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer, SigningKey};
use uuid::Uuid;

use super::parse_uuid;

pub const SIGNATURE_HEADER: &str = "x-sandbox-signature";
pub const RUNNER_ID_HEADER: &str = "x-sandbox-runner-id";
pub const KEY_ID_HEADER: &str = "x-sandbox-key-id";
pub const TIMESTAMP_HEADER: &str = "x-sandbox-timestamp";
pub const NONCE_HEADER: &str = "x-sandbox-nonce";

/// How far a signed timestamp may be from the server's clock.
pub const CLOCK_TOLERANCE_SECS: i64 = 300;

/// A nonce: 16 to 128 of `[A-Za-z0-9._-]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce(String);

impl Nonce {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let ok_len = (16..=128).contains(&raw.len());
        let ok_chars = raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok_len && ok_chars {
            Ok(Self(raw.to_owned()))
        } else {
            Err("must be 16 to 128 characters of [A-Za-z0-9._-]".into())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The signature headers of one request, each well-formed. Nothing here is trusted yet.
#[derive(Debug, Clone)]
pub struct RunnerSignature {
    pub runner_id: Uuid,
    pub key_id: Uuid,
    pub timestamp: i64,
    pub nonce: Nonce,
    pub signature: [u8; 64],
}

impl RunnerSignature {
    /// Reads the five headers through `header` (which returns `None` for an absent or repeated
    /// header); the error names the header and what is wrong with it.
    pub fn parse<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Result<Self, String> {
        let get = |name: &str| header(name).ok_or_else(|| format!("{name} is missing"));
        let runner_id = parse_uuid(get(RUNNER_ID_HEADER)?)
            .ok_or_else(|| format!("{RUNNER_ID_HEADER} must be a uuid"))?;
        let key_id = parse_uuid(get(KEY_ID_HEADER)?)
            .ok_or_else(|| format!("{KEY_ID_HEADER} must be a uuid"))?;
        let raw_ts = get(TIMESTAMP_HEADER)?;
        let timestamp = raw_ts
            .parse::<i64>()
            .ok()
            .filter(|_| !raw_ts.is_empty() && raw_ts.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("{TIMESTAMP_HEADER} must be Unix seconds"))?;
        let nonce = Nonce::parse(get(NONCE_HEADER)?).map_err(|r| format!("{NONCE_HEADER} {r}"))?;
        let raw_sig = get(SIGNATURE_HEADER)?;
        // Length-checked before decoding: an Ed25519 signature is 64 bytes, 88 in base64.
        let signature = (raw_sig.len() == 88)
            .then(|| STANDARD.decode(raw_sig).ok())
            .flatten()
            .and_then(|bytes| <[u8; 64]>::try_from(bytes).ok())
            .ok_or_else(|| format!("{SIGNATURE_HEADER} must be base64 of a 64-byte signature"))?;
        Ok(Self {
            runner_id,
            key_id,
            timestamp,
            nonce,
            signature,
        })
    }
}

/// The exact signed message: `v1`, method, path (without the query), timestamp, nonce, runner
/// id, key id and the lowercase hex SHA-256 of the raw body, joined by `\n`.
pub fn signing_message(
    method: &str,
    path: &str,
    timestamp: i64,
    nonce: &str,
    runner_id: Uuid,
    key_id: Uuid,
    body_sha256: &[u8; 32],
) -> String {
    let mut hex = String::with_capacity(64);
    for b in body_sha256 {
        hex.push_str(&format!("{b:02x}"));
    }
    format!("v1\n{method}\n{path}\n{timestamp}\n{nonce}\n{runner_id}\n{key_id}\n{hex}")
}

/// What a runner sends: the header values for one request.
#[derive(Debug, Clone)]
pub struct SignedHeaders {
    pub runner_id: String,
    pub key_id: String,
    pub timestamp: String,
    pub nonce: String,
    pub signature: String,
}

impl SignedHeaders {
    pub fn pairs(&self) -> [(&'static str, &str); 5] {
        [
            (RUNNER_ID_HEADER, &self.runner_id),
            (KEY_ID_HEADER, &self.key_id),
            (TIMESTAMP_HEADER, &self.timestamp),
            (NONCE_HEADER, &self.nonce),
            (SIGNATURE_HEADER, &self.signature),
        ]
    }
}

/// Signs a request as a runner would (`cpctl runners sign`, tests, benchmarks).
#[allow(clippy::too_many_arguments)]
pub fn sign_request(
    private_key: &[u8; 32],
    runner_id: Uuid,
    key_id: Uuid,
    method: &str,
    path: &str,
    body: &[u8],
    timestamp: i64,
    nonce: &str,
) -> SignedHeaders {
    use sha2::Digest;
    let digest: [u8; 32] = sha2::Sha256::digest(body).into();
    let message = signing_message(method, path, timestamp, nonce, runner_id, key_id, &digest);
    let signature = SigningKey::from_bytes(private_key).sign(message.as_bytes());
    SignedHeaders {
        runner_id: runner_id.to_string(),
        key_id: key_id.to_string(),
        timestamp: timestamp.to_string(),
        nonce: nonce.to_owned(),
        signature: STANDARD.encode(signature.to_bytes()),
    }
}

/// A new Ed25519 key pair: (private key, public key).
pub fn generate_keypair() -> ([u8; 32], [u8; 32]) {
    let secret: [u8; 32] = rand::random();
    let public = SigningKey::from_bytes(&secret).verifying_key().to_bytes();
    (secret, public)
}

/// The public key of a private key.
pub fn public_key_of(private_key: &[u8; 32]) -> [u8; 32] {
    SigningKey::from_bytes(private_key)
        .verifying_key()
        .to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers<'a>(h: &'a SignedHeaders) -> impl Fn(&str) -> Option<&'a str> {
        move |name: &str| {
            h.pairs()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v)
        }
    }

    #[test]
    fn signed_headers_parse_back() {
        let (secret, _) = generate_keypair();
        let (runner, key) = (Uuid::new_v4(), Uuid::new_v4());
        let h = sign_request(
            &secret,
            runner,
            key,
            "POST",
            "/p",
            b"{}",
            1700000000,
            "nonce-0123456789ab",
        );
        let parsed = RunnerSignature::parse(headers(&h)).expect("parses");
        assert_eq!(parsed.runner_id, runner);
        assert_eq!(parsed.key_id, key);
        assert_eq!(parsed.timestamp, 1700000000);
    }

    #[test]
    fn malformed_headers_name_the_header() {
        let (secret, _) = generate_keypair();
        let mut h = sign_request(
            &secret,
            Uuid::new_v4(),
            Uuid::new_v4(),
            "POST",
            "/p",
            b"",
            1,
            "short",
        );
        let err = RunnerSignature::parse(headers(&h)).unwrap_err();
        assert!(err.contains(NONCE_HEADER), "{err}");
        h.nonce = "n".repeat(16);
        h.signature = "not base64!".into();
        let err = RunnerSignature::parse(headers(&h)).unwrap_err();
        assert!(err.contains(SIGNATURE_HEADER), "{err}");
        h.timestamp = "-5".into();
        assert!(RunnerSignature::parse(headers(&h)).is_err());
    }

    #[test]
    fn message_is_the_documented_lines() {
        let id = Uuid::nil();
        let msg = signing_message("POST", "/x", 5, "n", id, id, &[0xab; 32]);
        let lines: Vec<&str> = msg.split('\n').collect();
        assert_eq!(lines.len(), 8);
        assert_eq!(lines[0], "v1");
        assert_eq!(lines[7], "ab".repeat(32));
    }
}
