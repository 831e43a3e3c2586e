//! Each runner's own Standard Webhooks secret: generated at registration, shown once, stored
//! sealed (bound to its runner, so a sealed secret copied onto another runner does not open),
//! and rotated with an overlap during which the old and the new secret both sign. The
//! dispatcher signs every attempt with the live ones ([`Services::signing_secrets`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

use super::runners::runner_event;
use super::{ServiceError, Services};
use crate::domain::{FieldError, RunnerSecret, ValidationErrors};
use crate::storage::WriteContext;

/// The longest overlap a rotation may ask for.
pub const MAX_SECRET_OVERLAP: Duration = Duration::from_secs(30 * 24 * 3600);

/// A rotated secret, shown once.
#[derive(Debug, Clone)]
pub struct RotatedSecret {
    pub runner_id: Uuid,
    pub secret: RunnerSecret,
    /// Until then the replaced secret signs too; `None` when there was none.
    pub previous_retires_at: Option<DateTime<Utc>>,
}

/// Binds a sealed secret to its runner.
fn aad(runner_id: Uuid) -> Vec<u8> {
    format!("runner-webhook-secret:{runner_id}").into_bytes()
}

impl Services {
    /// A new secret for `runner_id`, and its sealed form for the records store.
    pub(super) fn new_runner_secret(&self, runner_id: Uuid) -> (RunnerSecret, Vec<u8>) {
        let secret = RunnerSecret::generate();
        let sealed = self.secrets.seal(secret.as_bytes(), &aad(runner_id));
        (secret, sealed)
    }

    fn open_secret(&self, runner_id: Uuid, sealed: &[u8]) -> Option<RunnerSecret> {
        let opened = self
            .secrets
            .open(sealed, &aad(runner_id))
            .ok()
            .and_then(|bytes| RunnerSecret::from_bytes(&bytes).ok());
        if opened.is_none() {
            tracing::warn!(
                runner_id = %runner_id,
                "a runner's webhook secret cannot be opened with this store's key; rotate it"
            );
        }
        opened
    }

    /// Issues a new secret; the current one keeps signing for `overlap` (zero: it stops now).
    pub async fn rotate_runner_secret(
        &self,
        runner_id: Uuid,
        overlap: Duration,
        write: &WriteContext,
    ) -> Result<RotatedSecret, ServiceError> {
        if overlap > MAX_SECRET_OVERLAP {
            return Err(ValidationErrors::from(FieldError::new(
                "overlap",
                format!(
                    "must be at most {} hours",
                    MAX_SECRET_OVERLAP.as_secs() / 3600
                ),
            ))
            .into());
        }
        let (_, _, workspace) = self.runner_with_owners(runner_id).await?;
        let had_one = self
            .store
            .runner_secrets(runner_id)
            .await?
            .is_some_and(|s| s.current.is_some());
        let retires_at = Self::now()
            + chrono::Duration::from_std(overlap)
                .map_err(|e| ServiceError::Internal(e.to_string()))?;
        let previous_retires_at = had_one.then_some(retires_at);
        let data = json!({ "previousRetiresAt": previous_retires_at });
        let event = runner_event(
            &workspace,
            "runner.webhook_secret_rotated",
            runner_id,
            write,
            data,
        );
        let (secret, sealed) = self.new_runner_secret(runner_id);
        if !self
            .store
            .rotate_runner_secret(write, runner_id, &sealed, retires_at, &event)
            .await?
        {
            return Err(ServiceError::not_found("no such runner"));
        }
        Ok(RotatedSecret {
            runner_id,
            secret,
            previous_retires_at,
        })
    }

    /// The secrets that sign a dispatch to `runner_id` now: the current one, then the replaced
    /// one until it retires. A secret that does not open is skipped (and logged): the dispatch
    /// still carries the `v1a` signatures.
    pub(super) async fn signing_secrets(
        &self,
        runner_id: Uuid,
    ) -> Result<Vec<RunnerSecret>, ServiceError> {
        let Some(stored) = self.store.runner_secrets(runner_id).await? else {
            return Ok(vec![]);
        };
        let now = Self::now();
        let previous = stored
            .previous
            .filter(|(_, retires_at)| *retires_at > now)
            .map(|(sealed, _)| sealed);
        Ok([stored.current, previous]
            .into_iter()
            .flatten()
            .filter_map(|sealed| self.open_secret(runner_id, &sealed))
            .collect())
    }
}
