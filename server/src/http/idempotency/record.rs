//! What an idempotency record holds and where it lives: the request's place and fingerprint,
//! and the stored response's bytes.

use poem::http::{HeaderValue, StatusCode, header};
use poem::{Body, Response};
use sha2::{Digest, Sha256};

use super::REPLAYED_HEADER;
use crate::domain::IdempotencyKey;

/// Who asks and what: the record's place, and the fingerprint of the exact request.
pub(super) struct IdempotentRequest<'a> {
    /// `tok:<token id>`, or `runner:<id>` for signed requests.
    pub(super) principal: String,
    pub(super) operation: &'a str,
    pub(super) method: &'a str,
    /// As sent, without the query.
    pub(super) path: &'a str,
    /// SHA-256 of the canonical body (empty for none).
    pub(super) body_digest: [u8; 32],
    /// Whose quota a stored response counts against: `user:<id>` or `runner:<id>`.
    pub(super) quota_owner: Option<String>,
}

impl IdempotentRequest<'_> {
    pub(super) fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        for part in [
            self.method.as_bytes(),
            self.path.as_bytes(),
            &self.body_digest,
        ] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    pub(super) fn record_key(&self, prefix: &str, key: &IdempotencyKey) -> String {
        crate::storage::keys::idempotency_record(
            prefix,
            &self.principal,
            self.method,
            self.operation,
            key.as_str(),
        )
    }
}

/// status (2 bytes) | content-type length (2) | content-type | body
pub(super) async fn encode(response: Response) -> (Response, Vec<u8>) {
    // The parts stay: the route's response data (its operation id) travels on.
    let (mut parts, body) = response.into_parts();
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let body = body.into_vec().await.unwrap_or_default();
    let mut plain = Vec::with_capacity(4 + content_type.len() + body.len());
    plain.extend_from_slice(&parts.status.as_u16().to_be_bytes());
    plain.extend_from_slice(&(content_type.len() as u16).to_be_bytes());
    plain.extend_from_slice(content_type.as_bytes());
    plain.extend_from_slice(&body);
    if let Ok(value) = HeaderValue::from_str(&content_type) {
        parts.headers.insert(header::CONTENT_TYPE, value);
    }
    (Response::from_parts(parts, Body::from(body)), plain)
}

pub(super) fn decode(plain: &[u8]) -> Option<Response> {
    let status =
        StatusCode::from_u16(u16::from_be_bytes([*plain.first()?, *plain.get(1)?])).ok()?;
    let ct_len = usize::from(u16::from_be_bytes([*plain.get(2)?, *plain.get(3)?]));
    let content_type = std::str::from_utf8(plain.get(4..4 + ct_len)?).ok()?;
    let body = plain.get(4 + ct_len..)?.to_vec();
    let mut response = Response::builder()
        .status(status)
        .content_type(content_type)
        .body(body);
    response
        .headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::super::REPLAYED_HEADER;
    use super::*;

    #[tokio::test]
    async fn records_decode_to_the_same_response() {
        let original = Response::builder()
            .status(StatusCode::OK)
            .content_type("application/json")
            .body("{\"a\":1}");
        let (_, plain) = encode(original).await;
        let replay = decode(&plain).unwrap();
        assert_eq!(replay.status(), StatusCode::OK);
        assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
        assert_eq!(replay.into_body().into_string().await.unwrap(), "{\"a\":1}");
    }
}
