//! The token hashing key: configured, or generated once and kept in the records store.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rand::RngCore;

use super::ServiceError;
use crate::domain::{RecordCipher, TokenHasher, WebhookSigner};
use crate::storage::SettingsStore;

const SETTING: &str = "token_hash_key";
/// A fingerprint of the key in use: a key that differs from the one tokens were hashed with
/// would silently turn every token into a 401, so it is refused instead.
const CHECK_SETTING: &str = "token_hash_key_check";

async fn check_fingerprint(
    store: &dyn SettingsStore,
    hasher: &TokenHasher,
    source: &str,
) -> Result<(), ServiceError> {
    let fingerprint = hasher.fingerprint();
    let (stored, _) = store
        .setting_get_or_insert(CHECK_SETTING, &fingerprint)
        .await?;
    if stored == fingerprint {
        Ok(())
    } else {
        Err(ServiceError::Internal(format!(
            "the {source} token hashing key is not the one this records store's tokens were hashed with; \
             use the same CP_TOKEN_HASH_KEY as the server (or none on both)"
        )))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    Configured,
    Stored,
    /// Generated on this start; the caller warns once.
    Generated,
}

/// Builds the hasher from the configured key (base64), or from the one kept in the store,
/// generating and storing one when there is none.
pub async fn load_token_hasher(
    store: &dyn SettingsStore,
    configured: Option<&str>,
) -> Result<(TokenHasher, KeySource), ServiceError> {
    // An empty value (as `KEY=` in a compose file) counts as not configured.
    if let Some(encoded) = configured.filter(|k| !k.trim().is_empty()) {
        let key = STANDARD.decode(encoded.trim()).map_err(|_| {
            ServiceError::Internal("the token hashing key is not valid base64".into())
        })?;
        let hasher = TokenHasher::new(key).map_err(ServiceError::Internal)?;
        check_fingerprint(store, &hasher, "configured").await?;
        return Ok((hasher, KeySource::Configured));
    }
    if store.setting_get(SETTING).await?.is_none()
        && store.setting_get(CHECK_SETTING).await?.is_some()
    {
        return Err(ServiceError::Internal(
            "this records store is used with a configured token hashing key: set CP_TOKEN_HASH_KEY"
                .into(),
        ));
    }
    let mut candidate = [0u8; 32];
    rand::rng().fill_bytes(&mut candidate);
    let (stored, inserted) = store
        .setting_get_or_insert(SETTING, &STANDARD.encode(candidate))
        .await?;
    let key = STANDARD.decode(stored).map_err(|_| {
        ServiceError::Internal("the stored token hashing key is not valid base64".into())
    })?;
    let hasher = TokenHasher::new(key).map_err(ServiceError::Internal)?;
    Ok((
        hasher,
        if inserted {
            KeySource::Generated
        } else {
            KeySource::Stored
        },
    ))
}

const RECORD_KEY_SETTING: &str = "idempotency_record_key";

/// The cipher of stored idempotent responses: from the configured keys (comma-separated
/// base64, the first encrypts), or from one generated and kept in the records store.
pub async fn load_record_cipher(
    store: &dyn SettingsStore,
    configured: Option<&str>,
) -> Result<(RecordCipher, KeySource), ServiceError> {
    let decode = |encoded: &str| {
        STANDARD.decode(encoded.trim()).map_err(|_| {
            ServiceError::Internal("an idempotency encryption key is not valid base64".into())
        })
    };
    if let Some(list) = configured.filter(|k| !k.trim().is_empty()) {
        let keys = list
            .split(',')
            .filter(|k| !k.trim().is_empty())
            .map(decode)
            .collect::<Result<Vec<_>, _>>()?;
        let cipher = RecordCipher::new(&keys).map_err(ServiceError::Internal)?;
        return Ok((cipher, KeySource::Configured));
    }
    let mut candidate = [0u8; 32];
    rand::rng().fill_bytes(&mut candidate);
    let (stored, inserted) = store
        .setting_get_or_insert(RECORD_KEY_SETTING, &STANDARD.encode(candidate))
        .await?;
    let cipher = RecordCipher::new(&[decode(&stored)?]).map_err(ServiceError::Internal)?;
    Ok((
        cipher,
        if inserted {
            KeySource::Generated
        } else {
            KeySource::Stored
        },
    ))
}

const WEBHOOK_KEY_SETTING: &str = "webhook_signing_key";

/// The signer of webhooks sent to runners: from the configured seeds (comma-separated base64,
/// the first is current, all sign), or from one generated and kept in the records store, so
/// every replica and `cpctl` publish the same key.
pub async fn load_webhook_signer(
    store: &dyn SettingsStore,
    configured: Option<&str>,
) -> Result<(WebhookSigner, KeySource), ServiceError> {
    let decode = |encoded: &str| {
        STANDARD
            .decode(encoded.trim())
            .map_err(|_| ServiceError::Internal("a webhook signing key is not valid base64".into()))
    };
    if let Some(list) = configured.filter(|k| !k.trim().is_empty()) {
        let seeds = list
            .split(',')
            .filter(|k| !k.trim().is_empty())
            .map(decode)
            .collect::<Result<Vec<_>, _>>()?;
        let signer = WebhookSigner::from_seeds(&seeds).map_err(ServiceError::Internal)?;
        return Ok((signer, KeySource::Configured));
    }
    let mut candidate = [0u8; 32];
    rand::rng().fill_bytes(&mut candidate);
    let (stored, inserted) = store
        .setting_get_or_insert(WEBHOOK_KEY_SETTING, &STANDARD.encode(candidate))
        .await?;
    let signer = WebhookSigner::from_seeds(&[decode(&stored)?]).map_err(ServiceError::Internal)?;
    Ok((
        signer,
        if inserted {
            KeySource::Generated
        } else {
            KeySource::Stored
        },
    ))
}

const SECRETS_KEY_SETTING: &str = "runner_secret_key";

/// The cipher that seals runners' webhook secrets: generated once and kept in the records
/// store, like the other generated keys, so every replica and `cpctl` read the same secrets.
pub async fn load_secrets_cipher(store: &dyn SettingsStore) -> Result<RecordCipher, ServiceError> {
    let mut candidate = [0u8; 32];
    rand::rng().fill_bytes(&mut candidate);
    let (stored, _) = store
        .setting_get_or_insert(SECRETS_KEY_SETTING, &STANDARD.encode(candidate))
        .await?;
    let key = STANDARD.decode(stored).map_err(|_| {
        ServiceError::Internal("the stored runner secret key is not valid base64".into())
    })?;
    RecordCipher::new(&[key]).map_err(ServiceError::Internal)
}
