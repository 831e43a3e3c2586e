//! Runners' signed requests: the signature, its key and its nonce, checked before anything a
//! runner asks is read.

use std::time::Duration;

use ed25519_dalek::{Signature, VerifyingKey};
use uuid::Uuid;

use super::{ServiceError, Services};
use crate::domain::{CLOCK_TOLERANCE_SECS, RunnerSignature, signing_message};
use crate::storage::keys;

/// A runner whose signature verified: what it may act on.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerPrincipal {
    pub runner_id: Uuid,
    pub key_id: Uuid,
    pub pool_id: Uuid,
    pub workspace_id: Uuid,
    pub organisation_id: Uuid,
    /// Disabled: it may still report on the deliveries it holds, and on nothing else
    /// (docs/decisions.md, "A disabled runner reports only on what it holds").
    pub disabled: bool,
}

/// One signed request, as received.
#[derive(Debug, Clone)]
pub struct SignedRequest<'a> {
    pub signature: RunnerSignature,
    pub method: &'a str,
    /// As sent, without the query string.
    pub path: &'a str,
    pub body_sha256: [u8; 32],
}

/// Nonces are kept at least twice the clock tolerance, so a nonce cannot be replayed while its
/// timestamp is still acceptable.
const NONCE_TTL: Duration = Duration::from_secs(2 * CLOCK_TOLERANCE_SECS as u64 + 60);

impl Services {
    /// Verifies a runner's signature: timestamp within tolerance, a live key of that runner
    /// looked up by id (never taken from the request), the exact message, then the nonce, which
    /// is spent only by a request whose signature verified.
    pub async fn authenticate_runner(
        &self,
        request: &SignedRequest<'_>,
    ) -> Result<RunnerPrincipal, ServiceError> {
        let sig = &request.signature;
        let now = chrono::Utc::now().timestamp();
        if (now - sig.timestamp).abs() > CLOCK_TOLERANCE_SECS {
            return Err(ServiceError::signature(format!(
                "x-sandbox-timestamp is more than {CLOCK_TOLERANCE_SECS} s from the server's clock"
            )));
        }
        let rejected = || {
            ServiceError::signature("the signature does not verify with a live key of this runner")
        };
        let Some(found) = self.store.find_runner_key(sig.key_id).await? else {
            return Err(rejected());
        };
        if found.key.runner_id != sig.runner_id || found.key.revoked_at.is_some() {
            return Err(rejected());
        }
        let key = <[u8; 32]>::try_from(found.key.public_key.as_slice())
            .ok()
            .and_then(|b| VerifyingKey::from_bytes(&b).ok())
            .ok_or_else(rejected)?;
        let message = signing_message(
            request.method,
            request.path,
            sig.timestamp,
            sig.nonce.as_str(),
            sig.runner_id,
            sig.key_id,
            &request.body_sha256,
        );
        // verify_strict refuses weak keys and malleable signatures.
        key.verify_strict(message.as_bytes(), &Signature::from_bytes(&sig.signature))
            .map_err(|_| rejected())?;
        let nonces = self.nonces.as_ref().ok_or(ServiceError::Unavailable)?;
        let fresh = nonces
            .store
            .remember(
                &keys::runner_nonce(&nonces.key_prefix, sig.runner_id, sig.nonce.as_str()),
                NONCE_TTL,
            )
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "nonce store unavailable");
                ServiceError::Unavailable
            })?;
        if !fresh {
            return Err(ServiceError::signature("x-sandbox-nonce was already used"));
        }
        Ok(RunnerPrincipal {
            runner_id: sig.runner_id,
            key_id: sig.key_id,
            pool_id: found.pool_id,
            workspace_id: found.workspace_id,
            organisation_id: found.organisation_id,
            disabled: found.runner_disabled,
        })
    }
}
