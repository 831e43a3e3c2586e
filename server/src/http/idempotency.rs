//! Exact replay of mutating requests under an `Idempotency-Key`.
//!
//! The record is keyed by principal, method, operation and key, and holds a fingerprint of the
//! request (method, path, canonical body). Only 2xx responses are stored: a 4xx or 5xx had no
//! effect, so the key stays free and a corrected retry runs. A 401 never reaches this point (it
//! has no principal). Stored responses are encrypted; a record that cannot be decrypted is
//! logged, discarded and treated as absent.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use poem::http::{HeaderValue, StatusCode, header};
use poem::{IntoResponse, Response};
use poem_openapi::ApiResponse;
use poem_openapi::registry::{MetaResponses, Registry};
use sha2::{Digest, Sha256};

use super::error::ApiFailure;
use crate::domain::{IdempotencyKey, RecordCipher};
use crate::storage::{Claim, IdempotencyStore};

pub const REPLAYED_HEADER: &str = "idempotency-replayed";

/// The request's parsed `Idempotency-Key`, put in the request data by the middleware.
#[derive(Debug, Clone, Default)]
pub struct IdempotencyHeader(pub Option<IdempotencyKey>);

pub struct IdempotencyGuard {
    store: Arc<dyn IdempotencyStore>,
    cipher: RecordCipher,
    prefix: String,
    lease: Duration,
    ttl: Duration,
}

/// Who asks and what: the record's place, and the fingerprint of the exact request.
pub struct IdempotentRequest<'a> {
    /// `tok:<token id>`, or `runner:<id>` for signed requests.
    pub principal: String,
    pub operation: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    /// SHA-256 of the canonical body (empty for none).
    pub body_digest: [u8; 32],
}

impl IdempotentRequest<'_> {
    fn fingerprint(&self) -> String {
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

    fn record_key(&self, prefix: &str, key: &IdempotencyKey) -> String {
        crate::storage::keys::idempotency_record(
            prefix,
            &self.principal,
            self.method,
            self.operation,
            key.as_str(),
        )
    }
}

impl IdempotencyGuard {
    pub fn new(store: Arc<dyn IdempotencyStore>, cipher: RecordCipher, prefix: String) -> Self {
        Self {
            store,
            cipher,
            prefix,
            lease: Duration::from_secs(30),
            ttl: Duration::from_secs(24 * 3600),
        }
    }

    /// Runs `handler` at most once per key: a replay returns the stored response.
    pub async fn run<F, Fut>(
        &self,
        key: Option<&IdempotencyKey>,
        request: IdempotentRequest<'_>,
        handler: F,
    ) -> Result<Response, ApiFailure>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Response, ApiFailure>>,
    {
        let Some(key) = key else {
            return handler().await;
        };
        let place = request.record_key(&self.prefix, key);
        let fingerprint = request.fingerprint();
        let unavailable = |_| ApiFailure::from(crate::service::ServiceError::Unavailable);

        let mut claim = self
            .store
            .claim(&place, &fingerprint, self.lease)
            .await
            .map_err(unavailable)?;
        if let Claim::Done {
            fingerprint: stored,
            record,
        } = &claim
            && *stored == fingerprint
            && let Err(e) = self.cipher.open(record, place.as_bytes())
        {
            tracing::warn!(error = %e, "idempotency record cannot be decrypted; treating it as absent");
            self.store.discard(&place).await.map_err(unavailable)?;
            claim = self
                .store
                .claim(&place, &fingerprint, self.lease)
                .await
                .map_err(unavailable)?;
        }
        match claim {
            Claim::Done {
                fingerprint: stored,
                ..
            }
            | Claim::InFlight {
                fingerprint: stored,
            } if stored != fingerprint => Err(ApiFailure::new(
                StatusCode::CONFLICT,
                "idempotency_key_reused",
                "this Idempotency-Key was used with a different request",
            )),
            Claim::InFlight { .. } => Err(ApiFailure::new(
                StatusCode::CONFLICT,
                "idempotency_in_progress",
                "a request with this Idempotency-Key is still running; retry later",
            )),
            Claim::Done { record, .. } => {
                let plain = self
                    .cipher
                    .open(&record, place.as_bytes())
                    .map_err(|_| ApiFailure::internal())?;
                tracing::info!("idempotent replay");
                decode(&plain).ok_or_else(ApiFailure::internal)
            }
            Claim::Acquired { owner } => {
                let outcome = handler().await;
                match outcome {
                    Ok(response) if response.status().is_success() => {
                        let (response, plain) = encode(response).await;
                        let sealed = self.cipher.seal(&plain, place.as_bytes());
                        if let Err(e) = self
                            .store
                            .complete(&place, &owner, &fingerprint, &sealed, self.ttl)
                            .await
                        {
                            // The change is made; only the replay is lost. The lease frees the key.
                            tracing::error!(error = %e, "could not store the idempotent response");
                        }
                        Ok(response)
                    }
                    other => {
                        if let Err(e) = self.store.release(&place, &owner, &fingerprint).await {
                            tracing::warn!(error = %e, "could not release an idempotency claim; its lease will");
                        }
                        other
                    }
                }
            }
        }
    }
}

/// status (2 bytes) | content-type length (2) | content-type | body
async fn encode(response: Response) -> (Response, Vec<u8>) {
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let body = response.into_body().into_vec().await.unwrap_or_default();
    let mut plain = Vec::with_capacity(4 + content_type.len() + body.len());
    plain.extend_from_slice(&status.as_u16().to_be_bytes());
    plain.extend_from_slice(&(content_type.len() as u16).to_be_bytes());
    plain.extend_from_slice(content_type.as_bytes());
    plain.extend_from_slice(&body);
    let rebuilt = Response::builder()
        .status(status)
        .content_type(content_type)
        .body(body);
    (rebuilt, plain)
}

fn decode(plain: &[u8]) -> Option<Response> {
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

/// A handler's success, possibly replayed: documented as `T`, carried as a finished response.
pub struct Replayable<T>(Response, PhantomData<T>);

impl<T> Replayable<T> {
    pub fn new(response: Response) -> Self {
        Self(response, PhantomData)
    }
}

impl<T: ApiResponse> ApiResponse for Replayable<T> {
    fn meta() -> MetaResponses {
        T::meta()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: Send> IntoResponse for Replayable<T> {
    fn into_response(self) -> Response {
        self.0
    }
}

#[cfg(test)]
mod tests {
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
