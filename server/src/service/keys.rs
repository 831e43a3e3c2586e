//! The token hashing key: configured, or generated once and kept in the records store.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rand::RngCore;

use super::ServiceError;
use crate::domain::TokenHasher;
use crate::storage::SettingsStore;

const SETTING: &str = "token_hash_key";

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
    if let Some(encoded) = configured {
        let key = STANDARD.decode(encoded.trim()).map_err(|_| {
            ServiceError::Internal("the token hashing key is not valid base64".into())
        })?;
        let hasher = TokenHasher::new(key).map_err(ServiceError::Internal)?;
        return Ok((hasher, KeySource::Configured));
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
