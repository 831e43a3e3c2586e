//! The service's keys: configured, or generated once and kept in the records store wrapped with
//! the key-encryption key ([`KeyEncryptionKey`]), which lives outside it. A key an earlier
//! version kept in the clear is wrapped in place on the first start that reads it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::ServiceError;
use crate::domain::{KeyEncryptionKey, RecordCipher, TokenHasher, WebhookSigner};
use crate::storage::SettingsStore;
use crate::storage::WriteContext;

const SETTING: &str = "token_hash_key";
/// A fingerprint of the key in use: a key that differs from the one tokens were hashed with
/// would silently turn every token into a 401, so it is refused instead.
const CHECK_SETTING: &str = "token_hash_key_check";
const RECORD_KEY_SETTING: &str = "idempotency_record_key";
const WEBHOOK_KEY_SETTING: &str = "webhook_signing_key";
const SECRETS_KEY_SETTING: &str = "runner_secret_key";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    Configured,
    Stored,
    /// Generated on this start; the caller warns once.
    Generated,
}

impl KeySource {
    /// The caller's one warning about a generated key: fine for a trial, but production
    /// configures the `what` in `variable`.
    pub fn warn_if_generated(self, what: &str, variable: &str) {
        if self == KeySource::Generated {
            tracing::warn!(
                "no {what} configured: generated one and kept it in the records store; \
                 set {variable} in production"
            );
        }
    }
}

/// The 32-byte key kept under `name`, generated (and stored wrapped) when there is none.
async fn stored_key(
    store: &dyn SettingsStore,
    kek: &KeyEncryptionKey,
    name: &str,
) -> Result<(Vec<u8>, KeySource), ServiceError> {
    let candidate: [u8; 32] = rand::random();
    let (stored, inserted) = store
        .setting_get_or_insert(&WriteContext::system(), name, &kek.wrap(name, &candidate))
        .await?;
    match kek.unwrap(name, &stored) {
        Ok(Some(key)) if inserted => Ok((key, KeySource::Generated)),
        Ok(Some(key)) => Ok((key, KeySource::Stored)),
        Ok(None) => {
            let key = STANDARD.decode(stored.trim()).map_err(|_| {
                ServiceError::Internal(format!("the stored {name} is not valid base64"))
            })?;
            // Another process may be wrapping it at the same moment: either write is the key.
            if store
                .setting_replace(
                    &WriteContext::system(),
                    name,
                    &stored,
                    &kek.wrap(name, &key),
                )
                .await?
            {
                tracing::warn!(
                    setting = name,
                    "wrapped a key an earlier version kept in the clear; backups taken before \
                     now still hold it in the clear"
                );
            }
            Ok((key, KeySource::Stored))
        }
        Err(_) => Err(ServiceError::Internal(format!(
            "the {name} in the records store was wrapped with another key-encryption key; use \
             the same CP_KEY_ENCRYPTION_KEY (or key file) as the process that created it"
        ))),
    }
}

async fn check_fingerprint(
    store: &dyn SettingsStore,
    hasher: &TokenHasher,
    source: &str,
) -> Result<(), ServiceError> {
    let fingerprint = hasher.fingerprint();
    let (stored, _) = store
        .setting_get_or_insert(&WriteContext::system(), CHECK_SETTING, &fingerprint)
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

/// Comma-separated base64 keys, as configured; an empty value (`KEY=` in a compose file)
/// counts as none.
fn configured_list(
    configured: Option<&str>,
    what: &str,
) -> Result<Option<Vec<Vec<u8>>>, ServiceError> {
    let Some(list) = configured.filter(|k| !k.trim().is_empty()) else {
        return Ok(None);
    };
    list.split(',')
        .filter(|k| !k.trim().is_empty())
        .map(|k| {
            STANDARD
                .decode(k.trim())
                .map_err(|_| ServiceError::Internal(format!("{what} is not valid base64")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Builds the hasher from the configured key (base64), or from the one kept in the store,
/// generating and storing one when there is none.
pub async fn load_token_hasher(
    store: &dyn SettingsStore,
    kek: &KeyEncryptionKey,
    configured: Option<&str>,
) -> Result<(TokenHasher, KeySource), ServiceError> {
    if let Some(key) = configured_list(configured, "the token hashing key")? {
        let key = key.into_iter().next().unwrap_or_default();
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
    let (key, source) = stored_key(store, kek, SETTING).await?;
    let hasher = TokenHasher::new(key).map_err(ServiceError::Internal)?;
    Ok((hasher, source))
}

/// A key set that is configured (comma-separated base64, the first current), or else one key
/// generated once and kept in the records store, so every replica and `cpctl` use the same.
pub struct KeySet<K> {
    /// One of its keys, as an error names it.
    what: &'static str,
    /// Where the generated key is kept.
    setting: &'static str,
    build: fn(&[Vec<u8>]) -> Result<K, String>,
}

/// The cipher of stored idempotent responses: the first key encrypts, every key decrypts.
pub const RECORD_KEYS: KeySet<RecordCipher> = KeySet {
    what: "an idempotency encryption key",
    setting: RECORD_KEY_SETTING,
    build: RecordCipher::new,
};

/// The signer of webhooks sent to runners: the first seed is current, all sign, and every
/// replica and `cpctl` publish the same key.
pub const WEBHOOK_KEYS: KeySet<WebhookSigner> = KeySet {
    what: "a webhook signing key",
    setting: WEBHOOK_KEY_SETTING,
    build: WebhookSigner::from_seeds,
};

/// What `keys` builds from the configured keys, or from the stored one (generated when there
/// is none).
pub async fn load_keys<K>(
    store: &dyn SettingsStore,
    kek: &KeyEncryptionKey,
    configured: Option<&str>,
    keys: &KeySet<K>,
) -> Result<(K, KeySource), ServiceError> {
    let (list, source) = match configured_list(configured, keys.what)? {
        Some(list) => (list, KeySource::Configured),
        None => {
            let (key, source) = stored_key(store, kek, keys.setting).await?;
            (vec![key], source)
        }
    };
    let built = (keys.build)(&list).map_err(ServiceError::Internal)?;
    Ok((built, source))
}

/// The cipher that seals runners' webhook secrets: generated once and kept in the records
/// store, so every replica and `cpctl` read the same secrets.
pub async fn load_secrets_cipher(
    store: &dyn SettingsStore,
    kek: &KeyEncryptionKey,
) -> Result<RecordCipher, ServiceError> {
    let (key, _) = stored_key(store, kek, SECRETS_KEY_SETTING).await?;
    RecordCipher::new(&[key]).map_err(ServiceError::Internal)
}
