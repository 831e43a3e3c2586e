//! An organisation's tokens over the admin API: issue one for a user, list them (by user,
//! workspace, near expiry or disuse), show one with its last use, revoke (with cascade) and
//! rotate (with grace). The authorizer decides each first; then the rules written once here:
//! the route's organisation must hold the token or user (else the same 404 as one that does
//! not exist); an operator's token is issued, revoked or rotated only by an operator, since
//! issuing and rotating hand its secret to the caller (403); a disabled user gets no new
//! token (409). Events name the user and token that acted.

use uuid::Uuid;

use super::directory::{AdminPage, Paged};
use super::{
    IssueTokenInput, IssuedCredential, Operation, RotatedToken, ServiceError, Services,
    TokenListing,
};
use crate::domain::{
    ExpiresInDays, Principal, RevocationReason, Role, Scopes, Span, TokenName, parse_uuid,
};
use crate::storage::{RevokeOutcome, TokenFilter, TokenRecord, WriteContext};

/// A token to issue for a user: the issuance body without its organisation, which the route
/// names.
#[derive(Debug, Clone)]
pub struct UserTokenRequest {
    pub name: TokenName,
    pub scopes: Scopes,
    pub workspace_ids: Vec<Uuid>,
    pub environment_ids: Vec<Uuid>,
    pub expires_in_days: ExpiresInDays,
}

/// A revocation by an administrator: one workspace's grant, or (`None`) every grant.
#[derive(Debug, Clone)]
pub struct AdminRevocation {
    pub workspace_id: Option<Uuid>,
    pub reason: RevocationReason,
    pub cascade: bool,
}

/// Refuses a change to an operator's token by anyone but an operator.
fn may_touch(principal: &Principal, owner_role: Role) -> Result<(), ServiceError> {
    if owner_role == Role::Operator && principal.role != Role::Operator {
        return Err(ServiceError::forbidden(
            "only an operator issues, revokes or rotates an operator's tokens",
        ));
    }
    Ok(())
}

impl Services {
    /// The token the route names, which must belong to its organisation.
    async fn token_of(
        &self,
        organisation_id: Uuid,
        token: &str,
    ) -> Result<TokenRecord, ServiceError> {
        let missing = || ServiceError::not_found("no such token in this organisation");
        let id = parse_uuid(token).ok_or_else(missing)?;
        match self.token_record(id).await {
            Ok(t) if t.organisation_id == organisation_id => Ok(t),
            Ok(_) | Err(ServiceError::NotFound { .. }) => Err(missing()),
            Err(e) => Err(e),
        }
    }

    async fn owner_role(&self, token: &TokenRecord) -> Result<Role, ServiceError> {
        Ok(self.get_user(token.user_id).await?.role)
    }

    pub async fn admin_issue_user_token(
        &self,
        principal: &Principal,
        organisation: &str,
        user: &str,
        request: UserTokenRequest,
        write: &WriteContext,
    ) -> Result<IssuedCredential, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::IssueUserToken,
                organisation,
                Some(user),
            )
            .await?;
        let user = self.member_of(org, user).await?;
        may_touch(principal, user.role)?;
        not_disabled(&user)?;
        let input = IssueTokenInput::new(
            request.name,
            request.scopes,
            org,
            request.workspace_ids,
            request.environment_ids,
            request.expires_in_days,
        )?;
        self.issue_for(&user, input, write).await
    }

    /// The organisation's tokens `listing` selects, in the order they were issued.
    pub async fn admin_list_tokens(
        &self,
        principal: &Principal,
        organisation: &str,
        listing: &TokenListing,
        page: AdminPage,
    ) -> Result<Paged<TokenRecord>, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::ListTokens, organisation, None)
            .await?;
        let mut filter = listing.filter(Self::now());
        filter.organisation_id = Some(org);
        self.token_page(filter, page).await
    }

    /// One page of the tokens `filter` selects, in the order they were issued.
    pub(super) async fn token_page(
        &self,
        mut filter: TokenFilter,
        page: AdminPage,
    ) -> Result<Paged<TokenRecord>, ServiceError> {
        filter.after = page.after();
        filter.limit = Some(page.fetch());
        let rows = self.store.list_tokens(&filter).await?;
        Ok(page.of(rows, |t| t.id))
    }

    /// One token, whatever its state, with its last use; never its secret.
    pub async fn admin_get_token(
        &self,
        principal: &Principal,
        organisation: &str,
        token: &str,
    ) -> Result<TokenRecord, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::GetToken, organisation, Some(token))
            .await?;
        self.token_of(org, token).await
    }

    pub async fn admin_revoke_token(
        &self,
        principal: &Principal,
        organisation: &str,
        token: &str,
        revocation: AdminRevocation,
        write: &WriteContext,
    ) -> Result<RevokeOutcome, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::RevokeTokenAsAdmin,
                organisation,
                Some(token),
            )
            .await?;
        let token = self.token_of(org, token).await?;
        may_touch(principal, self.owner_role(&token).await?)?;
        self.revoke_grant(
            org,
            revocation.workspace_id,
            token.id,
            revocation.reason,
            revocation.cascade,
            write,
        )
        .await
    }

    pub async fn admin_rotate_token(
        &self,
        principal: &Principal,
        organisation: &str,
        token: &str,
        grace: Span,
        write: &WriteContext,
    ) -> Result<RotatedToken, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::RotateToken, organisation, Some(token))
            .await?;
        let token = self.token_of(org, token).await?;
        may_touch(principal, self.owner_role(&token).await?)?;
        self.rotate(token, grace, write).await
    }
}

/// A disabled user gets no new token: it could not use one, and enabling it later should not
/// bring back tokens nobody asked for meanwhile.
pub(super) fn not_disabled(user: &crate::storage::User) -> Result<(), ServiceError> {
    match user.disabled {
        None => Ok(()),
        Some(_) => Err(ServiceError::Conflict {
            code: "conflict",
            message: "the user is disabled; enable it before issuing it a token".into(),
            details: None,
        }),
    }
}
