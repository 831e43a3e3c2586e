//! Personal access tokens and their per-workspace grants.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{NewAuditEvent, Role};
use crate::storage::StoreError;
use crate::storage::WriteContext;

/// A token as stored, without its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRecord {
    pub id: Uuid,
    pub public_id: String,
    pub user_id: Uuid,
    pub organisation_id: Uuid,
    pub name: String,
    pub scopes: Vec<String>,
    /// Workspaces whose grant is still active, in grant order.
    pub workspace_ids: Vec<Uuid>,
    pub environment_ids: Vec<Uuid>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The token that issued this one; `None` when cpctl issued it. Its grants on every new
    /// workspace are re-checked in the insert's transaction, so a revocation racing the
    /// issuance cannot be escaped.
    pub issued_by_token_id: Option<Uuid>,
    /// The last use recorded (about once a minute at most); `None` before the first.
    pub last_use: Option<TokenUse>,
}

/// One use of a token, as the last-use record keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenUse {
    pub at: DateTime<Utc>,
    /// The client address the request came from.
    pub address: String,
    /// The `User-Agent` it sent, bounded (`service::token_hygiene`); stored, never logged.
    pub user_agent: Option<String>,
}

/// A use of a token to record as its last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastUseWrite {
    pub token_id: Uuid,
    pub used: TokenUse,
}

/// What authentication needs: the record and the keyed hash of its secret. Its
/// `token.public_id` is the public id asked for: after a rotation, a replaced one during its
/// grace, so that a principal re-checked later (an open audit stream) re-reads that secret.
#[derive(Debug, Clone)]
pub struct StoredCredential {
    pub token: TokenRecord,
    pub secret_hash: Vec<u8>,
    /// For a secret a rotation replaced: until when it still authenticates.
    pub valid_until: Option<DateTime<Utc>>,
    /// The token's user is disabled (`cpctl users disable`): no secret of it authenticates.
    pub user_disabled: bool,
    /// The token's user's role now: what admin scopes the token may still use.
    pub user_role: Role,
}

impl StoredCredential {
    /// Whether this secret may authenticate at `now` as far as its user and rotation go (the
    /// token's own revocation and expiry are the principal's to check).
    pub fn usable_at(&self, now: DateTime<Utc>) -> bool {
        !self.user_disabled && self.valid_until.is_none_or(|until| until > now)
    }
}

/// A rotation: the token keeps its id, grants, scopes, expiry, environments and lineage, and
/// gets `public_id` and `secret_hash`; the replaced ones authenticate until `previous_valid_until`.
#[derive(Debug, Clone)]
pub struct RotateToken {
    pub token_id: Uuid,
    pub public_id: String,
    pub secret_hash: Vec<u8>,
    pub rotated_at: DateTime<Utc>,
    /// `rotated_at` itself for a rotation without grace.
    pub previous_valid_until: DateTime<Utc>,
    /// One per workspace the token reaches.
    pub events: Vec<NewAuditEvent>,
}

#[derive(Debug, Clone)]
pub struct NewToken {
    pub record: TokenRecord,
    pub secret_hash: Vec<u8>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum InsertTokenError {
    #[error("an active token with this name already exists")]
    NameTaken,
    #[error("the owner already holds the maximum number of active tokens")]
    LimitReached,
    #[error("the issuing token lost access to a workspace while issuing")]
    IssuerLostAccess,
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Debug, Clone, Default)]
pub struct TokenFilter {
    pub token_id: Option<Uuid>,
    pub user_id: Option<Uuid>,
    pub workspace_id: Option<Uuid>,
    /// Only tokens live at this instant: not revoked, not expired.
    pub live_at: Option<DateTime<Utc>>,
    /// Only tokens expiring at or before this instant.
    pub expires_by: Option<DateTime<Utc>>,
    /// Only tokens not used since this instant: last used before it, or never used and
    /// created before it.
    pub unused_since: Option<DateTime<Utc>>,
    pub organisation_id: Option<Uuid>,
    /// Only tokens after this one in the listing's order (created, then id): a page's cursor.
    pub after: Option<Uuid>,
    /// At most this many; all when `None`.
    pub limit: Option<u32>,
}

/// Live tokens whose expiry is near and which have had no notice yet, claimed by the one
/// writer that marks them noticed: at most `limit` of them, expiring after `now` and at or
/// before `until`.
#[derive(Debug, Clone, Copy)]
pub struct ExpiringTokens {
    pub now: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub limit: i64,
}

/// The events of one token's expiry notice, given the token as it is in the claiming
/// transaction (its `workspace_ids` are the grants still active).
pub type NoticeEvents = dyn Fn(&TokenRecord) -> Vec<NewAuditEvent> + Send + Sync;

/// Revocation of one token's access to one workspace, or (`workspace_id: None`) to all of them.
#[derive(Debug, Clone)]
pub struct RevokeGrant {
    pub token_id: Uuid,
    pub workspace_id: Option<Uuid>,
    pub reason: String,
    pub revoked_at: DateTime<Utc>,
    /// Also revoke this workspace's grant of every descendant (tokens issued by the token,
    /// transitively) that holds it, each with its own event.
    pub cascade: bool,
    /// The event of each revoked grant: this one with the grant's workspace and token, its data
    /// gaining `tokenId`, `tokenRevoked` and, for a descendant, `cascadedFrom` (`token_id`).
    pub event: NewAuditEvent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RevokeOutcome {
    /// True when the token has no workspace left and is revoked entirely.
    pub token_revoked: bool,
    /// Descendants whose grant on the workspace was revoked with it.
    pub descendants_revoked: u64,
}

/// Personal access tokens and their per-workspace grants.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// Inserts the token unless its owner already has an active token of that name or
    /// `max_active` active tokens; checked and written atomically.
    async fn insert_token(
        &self,
        write: &WriteContext,
        token: &NewToken,
        events: &[NewAuditEvent],
        max_active: u32,
        now: DateTime<Utc>,
    ) -> Result<(), InsertTokenError>;
    async fn find_credential(
        &self,
        public_id: &str,
    ) -> Result<Option<StoredCredential>, StoreError>;
    /// `None` when the token has no active grant on that workspace (or none at all); all in one
    /// transaction, descendants included when `cascade`.
    async fn revoke_grant(
        &self,
        write: &WriteContext,
        revoke: &RevokeGrant,
    ) -> Result<Option<RevokeOutcome>, StoreError>;
    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>, StoreError>;
    /// Replaces the token's secret; `false` (nothing written) when the token is revoked or
    /// expired at `rotated_at`. Any earlier replaced secret still in its grace stops then.
    async fn rotate_token(
        &self,
        write: &WriteContext,
        rotate: &RotateToken,
    ) -> Result<bool, StoreError>;
    /// Records each use as its token's last, in one transaction, unless a later one is already
    /// recorded. Returns the tokens whose row changed.
    async fn record_last_uses(
        &self,
        write: &WriteContext,
        uses: &[LastUseWrite],
    ) -> Result<u64, StoreError>;
    /// Claims the tokens `due` selects (a conditional update, so concurrent callers share none)
    /// and writes each one's `events` with the claim, in one transaction. Returns how many were
    /// claimed.
    async fn notice_expiring_tokens(
        &self,
        write: &WriteContext,
        due: ExpiringTokens,
        events: &NoticeEvents,
    ) -> Result<usize, StoreError>;
}
