//! `/v1/me`: a token reads who it is, as authentication found it (its user's role now, and
//! only the scopes that role allows), lists its own user's tokens and revokes one of them. The
//! authorizer is asked like for every operation; the default policy lets any live token ask,
//! whatever its scopes. What a caller reaches here is its own user's and nothing else: a token
//! of another user is the same 404 as one that does not exist.

use super::directory::{AdminPage, Paged};
use super::{AdminRevocation, Operation, Permission, ServiceError, Services, TokenListing};
use crate::domain::{Principal, parse_uuid};
use crate::storage::{RevokeOutcome, TokenRecord, WriteContext};

impl Services {
    pub async fn caller(&self, principal: &Principal) -> Result<Principal, ServiceError> {
        self.authorize(principal, Operation::GetCaller, None, vec![])
            .await?;
        Ok(principal.clone())
    }

    /// The tokens of the caller's user, in any state, in the order they were issued (as the
    /// organisation's list): `listing`'s time filters apply, its user and workspace are
    /// ignored (the user is the caller's).
    pub async fn list_own_tokens(
        &self,
        principal: &Principal,
        listing: &TokenListing,
        page: AdminPage,
    ) -> Result<Paged<TokenRecord>, ServiceError> {
        self.authorize(principal, Operation::ListOwnTokens, None, vec![])
            .await?;
        let mut filter = listing.filter(Self::now());
        filter.user_id = Some(principal.user_id);
        filter.workspace_id = None;
        filter.organisation_id = Some(principal.organisation_id);
        self.token_page(filter, page).await
    }

    /// Revokes a token of the caller's own user as an administrator's revocation does (one
    /// workspace's grant or all of them, with `cascade` its descendants, which are the same
    /// user's); the caller's own token may revoke itself. Recorded as the caller (`write`).
    pub async fn revoke_own_token(
        &self,
        principal: &Principal,
        token: &str,
        revocation: AdminRevocation,
        write: &WriteContext,
    ) -> Result<RevokeOutcome, ServiceError> {
        self.authorize_permission(principal, &Permission::RevokeOwnToken { token })
            .await?;
        let token = self.own_token(principal, token).await?;
        self.revoke_grant(
            token.organisation_id,
            revocation.workspace_id,
            token.id,
            revocation.reason,
            revocation.cascade,
            write,
        )
        .await
    }

    /// The token the path names, which must be the caller's user's: any other, like an id
    /// that does not exist, is `no such token`.
    async fn own_token(
        &self,
        principal: &Principal,
        token: &str,
    ) -> Result<TokenRecord, ServiceError> {
        let missing = || ServiceError::not_found("no such token");
        let id = parse_uuid(token).ok_or_else(missing)?;
        match self.token_record(id).await {
            Ok(t) if t.user_id == principal.user_id => Ok(t),
            Ok(_) | Err(ServiceError::NotFound { .. }) => Err(missing()),
            Err(e) => Err(e),
        }
    }
}
