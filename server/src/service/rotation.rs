//! Token rotation: `cpctl tokens rotate` and the admin API's `rotateToken`.
//!
//! The token keeps its record (id, grants, scopes, expiry, environments, lineage) and gets a new
//! public id and secret; the replaced pair moves to `token_previous_secrets` and authenticates
//! until the grace ends (at once without one). Authentication reads both on every request, so
//! the end holds on every replica, and an open audit stream of the old secret ends at its next
//! re-check. A rotation within an earlier one's grace ends that grace: at most two secrets of a
//! token authenticate at any time.

use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

use super::{IssuedCredential, ServiceError, Services};
use crate::domain::{
    CorrelationId, FieldError, NewAuditEvent, Span, Timestamp, TokenSecret, ValidationErrors,
};
use crate::storage::{RotateToken, TokenRecord, WriteContext};

/// The longest grace a rotation may give the replaced secret.
pub const MAX_ROTATION_GRACE_DAYS: i64 = 30;

pub const TOKEN_ROTATED: &str = "token.rotated";

/// A rotated token: its new secret (shown once) and when the replaced one stops.
#[derive(Debug, Clone)]
pub struct RotatedToken {
    pub credential: IssuedCredential,
    pub previous_valid_until: DateTime<Utc>,
}

impl Services {
    /// A new secret for a live token of an enabled user; the old one keeps working for `grace`.
    pub async fn rotate_token(
        &self,
        token_id: Uuid,
        grace: Span,
        cid: &CorrelationId,
    ) -> Result<RotatedToken, ServiceError> {
        let token = self.token_record(token_id).await?;
        self.rotate(token, grace, &WriteContext::admin(cid)).await
    }

    /// Rotates `token` (as just read), its events written as `write`'s actor.
    pub(super) async fn rotate(
        &self,
        token: TokenRecord,
        grace: Span,
        write: &WriteContext,
    ) -> Result<RotatedToken, ServiceError> {
        let token_id = token.id;
        if grace.duration() > chrono::Duration::days(MAX_ROTATION_GRACE_DAYS) {
            return Err(ValidationErrors::from(FieldError::new(
                "grace",
                format!("must be at most {MAX_ROTATION_GRACE_DAYS}d"),
            ))
            .into());
        }
        let now = Self::now();
        let refuse = |why: &str| ServiceError::Conflict {
            code: "conflict",
            message: format!("token {token_id} {why}; it cannot be rotated"),
            details: None,
        };
        if token.revoked_at.is_some() || token.workspace_ids.is_empty() {
            return Err(refuse("is revoked"));
        }
        if token.expires_at <= now {
            return Err(refuse("has expired"));
        }
        if self.get_user(token.user_id).await?.disabled.is_some() {
            return Err(refuse("belongs to a disabled user"));
        }
        let (public_id, secret) = TokenSecret::generate();
        let prefix = public_id.display_prefix();
        let previous_prefix = format!("{}{}", crate::domain::TOKEN_PREFIX, token.public_id);
        let previous_valid_until = now + grace.duration();
        let events: Vec<NewAuditEvent> = token
            .workspace_ids
            .iter()
            .map(|ws| NewAuditEvent {
                organisation_id: token.organisation_id,
                workspace_id: Some(*ws),
                event_type: TOKEN_ROTATED,
                actor: write.actor(),
                target_kind: "token",
                target_id: token.id,
                correlation_id: write.correlation_id().to_string(),
                occurred_at: now,
                data: json!({
                    "tokenId": token.id,
                    "prefix": prefix,
                    "previousPrefix": previous_prefix,
                    "graceSeconds": grace.seconds(),
                    "previousValidUntil": Timestamp::new(previous_valid_until),
                }),
            })
            .collect();
        let rotate = RotateToken {
            token_id: token.id,
            public_id: public_id.as_str().to_owned(),
            secret_hash: self.hasher.hash(&secret),
            rotated_at: now,
            previous_valid_until,
            events,
        };
        if !self.store.rotate_token(write, &rotate).await? {
            return Err(refuse("was revoked or expired meanwhile"));
        }
        tracing::info!(%token_id, prefix = %prefix, grace = %grace, "token rotated");
        let mut record = token;
        record.public_id = rotate.public_id;
        Ok(RotatedToken {
            credential: IssuedCredential {
                record,
                prefix,
                secret,
            },
            previous_valid_until,
        })
    }
}
