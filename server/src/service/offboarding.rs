//! Offboarding: `cpctl users disable` and `enable`.
//!
//! Disabling a user is a state of the user, not a revocation of its tokens: authentication reads
//! the user's state with the credential in one statement (`find_credential`), on every request
//! and on every replica, so every token of a disabled user answers 401 at once, and an open
//! audit stream of one ends at its next re-check (`service/audit.rs`, every second). Tokens issued
//! by a token belong to the same user, so the lineage needs no cascade: they stop with it. Enabling
//! the user brings back every token that is otherwise live (not revoked, not expired); nothing
//! about the tokens themselves was changed.

use serde_json::json;
use uuid::Uuid;

use super::admin::event_by;
use super::{ServiceError, Services};
use crate::domain::{CorrelationId, RevocationReason, Role};
use crate::storage::{TokenFilter, TokenRecord, User, UserDisabled, WriteContext};

/// A user after `disable` or `enable`; `changed` is false when it already was so (an idempotent
/// repeat: nothing written, no event, the first disabling's time and reason kept).
#[derive(Debug, Clone)]
pub struct UserChange {
    pub user: User,
    pub changed: bool,
}

/// A user and every token it holds (revoked and expired ones included), for `cpctl users show`.
#[derive(Debug, Clone)]
pub struct UserOverview {
    pub user: User,
    pub tokens: Vec<TokenRecord>,
}

pub const USER_DISABLED: &str = "user.disabled";
pub const USER_ENABLED: &str = "user.enabled";
pub const USER_ROLE_CHANGED: &str = "user.role_changed";

impl Services {
    /// Stops every token of the user from authenticating, until [`Services::enable_user`].
    pub async fn disable_user(
        &self,
        user_id: Uuid,
        reason: Option<RevocationReason>,
        cid: &CorrelationId,
    ) -> Result<UserChange, ServiceError> {
        let user = self.get_user(user_id).await?;
        self.disable(user, reason, &WriteContext::admin(cid)).await
    }

    /// Lets the user's tokens authenticate again, those not revoked or expired.
    pub async fn enable_user(
        &self,
        user_id: Uuid,
        cid: &CorrelationId,
    ) -> Result<UserChange, ServiceError> {
        let user = self.get_user(user_id).await?;
        self.enable(user, &WriteContext::admin(cid)).await
    }

    /// Gives the user `role`. Lowered, its tokens lose the admin scopes at their next request
    /// on every replica (authentication reads the role); nothing else of them changes. Setting
    /// the role it has changes nothing and writes no event.
    pub async fn set_user_role(
        &self,
        user_id: Uuid,
        role: Role,
        cid: &CorrelationId,
    ) -> Result<UserChange, ServiceError> {
        let user = self.get_user(user_id).await?;
        self.assign_role(user, role, &WriteContext::admin(cid))
            .await
    }

    pub(super) async fn disable(
        &self,
        user: User,
        reason: Option<RevocationReason>,
        write: &WriteContext,
    ) -> Result<UserChange, ServiceError> {
        let disabled = UserDisabled {
            at: Self::now(),
            reason: reason.map(|r| r.as_str().to_owned()),
        };
        let event = event_by(
            write,
            user.organisation_id,
            None,
            USER_DISABLED,
            "user",
            user.id,
            json!({ "userId": user.id, "reason": disabled.reason }),
        );
        self.set_disabled(user, Some(&disabled), &event, write)
            .await
    }

    pub(super) async fn enable(
        &self,
        user: User,
        write: &WriteContext,
    ) -> Result<UserChange, ServiceError> {
        let event = event_by(
            write,
            user.organisation_id,
            None,
            USER_ENABLED,
            "user",
            user.id,
            json!({ "userId": user.id }),
        );
        self.set_disabled(user, None, &event, write).await
    }

    pub(super) async fn assign_role(
        &self,
        user: User,
        role: Role,
        write: &WriteContext,
    ) -> Result<UserChange, ServiceError> {
        let event = event_by(
            write,
            user.organisation_id,
            None,
            USER_ROLE_CHANGED,
            "user",
            user.id,
            json!({ "from": user.role.as_str(), "to": role.as_str() }),
        );
        let changed = self
            .store
            .set_user_role(write, user.id, user.role, role, &event)
            .await?;
        tracing::info!(user_id = %user.id, role = role.as_str(), changed, "user role set");
        let user = User { role, ..user };
        self.changed_user(user, changed).await
    }

    /// The user after a change: as written when this request changed it (a keyed request's
    /// write is not committed until its response is stored, so a read now would see the row as
    /// it was), or as stored when it changed nothing (another request's state, committed).
    async fn changed_user(&self, written: User, changed: bool) -> Result<UserChange, ServiceError> {
        let user = match changed {
            true => written,
            false => self.get_user(written.id).await?,
        };
        Ok(UserChange { user, changed })
    }

    async fn set_disabled(
        &self,
        user: User,
        disabled: Option<&UserDisabled>,
        event: &crate::domain::NewAuditEvent,
        write: &WriteContext,
    ) -> Result<UserChange, ServiceError> {
        let changed = self
            .store
            .set_user_disabled(write, user.id, disabled, event)
            .await?;
        tracing::info!(user_id = %user.id, disabled = disabled.is_some(), changed, "user state set");
        let user = User {
            disabled: disabled.cloned(),
            ..user
        };
        self.changed_user(user, changed).await
    }

    pub async fn user_overview(&self, user_id: Uuid) -> Result<UserOverview, ServiceError> {
        let user = self.get_user(user_id).await?;
        let tokens = self
            .list_tokens(&TokenFilter {
                user_id: Some(user.id),
                ..TokenFilter::default()
            })
            .await?;
        Ok(UserOverview { user, tokens })
    }
}
