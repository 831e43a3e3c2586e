//! An organisation's tokens on the admin plane: `/v1/organisations/{organisationId}/tokens`
//! (list), `/tokens/{tokenId}` (show, revoke, rotate) and issuance for a user under
//! `/users/{userId}/tokens`. Thin: the rules are `service/admin_tokens.rs`'s.

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use super::tokens::IssuedCredentialEnvelope;
use super::users::TokenSummaryBody;
use crate::domain::{
    ExpiresInDays, FieldError, Operation, RevocationReason, Scope, Scopes, Span, Timestamp,
    TokenName, ValidationErrors,
};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::http::fields::{GraceSeconds, List, request_body};
use crate::http::idempotency::{Idempotent, Permitted, admin_permission};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{
    AdminPage, AdminRevocation, Paged, Permission, RotatedToken, Services, TokenListing,
    UserTokenRequest,
};
use crate::storage::{RevokeOutcome, TokenRecord};

request_body! {
    /// Request body of issuing a token for a user. No other properties are allowed.
    pub struct UserTokenInput {
        "name" => name: required TokenName,
        /// Each must be one the user's role allows (403 otherwise).
        "scopes" => scopes: required List<Scope>,
        /// Workspaces of the organisation in the path.
        "workspaceIds" => workspace_ids: required List<Uuid, 1>,
        /// Environments within those workspaces; empty means all of them.
        "environmentIds" => environment_ids: default List<Uuid>,
        "expiresInDays" => expires_in_days: default ExpiresInDays,
    }
}

impl FromJson for UserTokenRequest {
    type Body = UserTokenInput;

    fn from_body(body: UserTokenInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            name: body.name,
            scopes: body.scopes.0.into_iter().collect::<Scopes>(),
            workspace_ids: body.workspace_ids.0,
            environment_ids: body.environment_ids.0,
            expires_in_days: body.expires_in_days,
        })
    }
}

impl Permitted for UserTokenRequest {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::IssueUserToken, req)
    }
}

request_body! {
    /// Request body of an administrator's revocation.
    pub struct AdminRevokeInput {
        /// Why; kept in the audit log.
        "reason" => reason: required RevocationReason,
        /// Revoke only this workspace's access; absent: every workspace's, so the token is
        /// revoked.
        "workspaceId" => workspace_id: optional Uuid,
        /// Also revoke the same access of every token issued by this one, transitively.
        "cascade" => cascade: default bool,
    }
}

impl FromJson for AdminRevocation {
    type Body = AdminRevokeInput;

    fn from_body(body: AdminRevokeInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            workspace_id: body.workspace_id,
            reason: body.reason,
            cascade: body.cascade,
        })
    }
}

impl Permitted for AdminRevocation {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::RevokeTokenAsAdmin, req)
    }
}

request_body! {
    /// Request body of a rotation.
    pub struct RotateTokenInput {
        /// How long the replaced secret keeps authenticating; 0 (the default) ends it at once.
        "graceSeconds" => grace: default GraceSeconds,
    }
}

#[derive(Debug)]
pub struct Rotation(Span);

impl FromJson for Rotation {
    type Body = RotateTokenInput;

    fn from_body(body: RotateTokenInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.grace.0))
    }
}

impl Permitted for Rotation {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::RotateToken, req)
    }
}

#[derive(Object)]
#[oai(rename = "TokenPage", rename_all = "camelCase")]
pub struct TokenPageBody {
    /// In the order the tokens were issued.
    items: Vec<TokenSummaryBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

impl From<Paged<TokenRecord>> for TokenPageBody {
    fn from(page: Paged<TokenRecord>) -> Self {
        Self {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct TokenEnvelope {
    token: TokenSummaryBody,
}

#[derive(Object)]
#[oai(rename = "AdminRevocationResult", rename_all = "camelCase")]
pub struct AdminRevocationBody {
    /// True when the token has no workspace left and is revoked entirely.
    token_revoked: bool,
    /// Tokens issued by it (transitively) whose access was revoked with it.
    descendants_revoked: u64,
}

impl From<RevokeOutcome> for AdminRevocationBody {
    fn from(o: RevokeOutcome) -> Self {
        Self {
            token_revoked: o.token_revoked,
            descendants_revoked: o.descendants_revoked,
        }
    }
}

/// A rotated token: `credential.token` is its new secret, shown only here.
#[derive(Object)]
#[oai(rename = "RotatedToken", rename_all = "camelCase")]
pub struct RotatedTokenBody {
    credential: super::tokens::IssuedCredentialBody,
    /// When the replaced secret stops authenticating.
    previous_valid_until: Timestamp,
}

impl From<RotatedToken> for RotatedTokenBody {
    fn from(r: RotatedToken) -> Self {
        Self {
            credential: r.credential.into(),
            previous_valid_until: r.previous_valid_until.into(),
        }
    }
}

#[derive(ApiResponse)]
pub enum IssueUserTokenResponse {
    /// The token was issued; `credential.token` is the secret, shown only here.
    #[oai(status = 200)]
    Ok(Json<IssuedCredentialEnvelope>),
}

#[derive(ApiResponse)]
pub enum ListTokensResponse {
    #[oai(status = 200)]
    Ok(Json<TokenPageBody>),
}

#[derive(ApiResponse)]
pub enum GetTokenResponse {
    #[oai(status = 200)]
    Ok(Json<TokenEnvelope>),
}

#[derive(ApiResponse)]
pub enum AdminRevokeResponse {
    /// The access is revoked.
    #[oai(status = 200)]
    Ok(Json<AdminRevocationBody>),
}

#[derive(ApiResponse)]
pub enum RotateTokenResponse {
    #[oai(status = 200)]
    Ok(Json<RotatedTokenBody>),
}

error_responses!(ChangeTokenErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);
error_responses!(ReadTokensErrors: 400, 401, 403, 404, 413, 429, 500, 503);

fn issue_user_token(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::IssueUserToken, ep)
}

fn list_tokens(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListTokens, ep)
}

fn get_token(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::GetToken, ep)
}

fn revoke_token(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RevokeTokenAsAdmin, ep)
}

fn rotate_token(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RotateToken, ep)
}

/// A time filter of the listing, in seconds.
pub(super) fn span(field: &str, seconds: Option<i64>) -> Result<Option<Span>, FieldError> {
    seconds
        .map(|s| {
            Span::from_seconds(s).map_err(|reason| FieldError::new(field, reason).with_value(s))
        })
        .transpose()
}

pub struct AdminTokensApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Admin")]
impl AdminTokensApi {
    /// Issue a token for a user
    ///
    /// Requires `admin:write` and a user who administers the organisation; an operator's
    /// tokens are issued only by an operator. The scopes must be ones the user's role allows,
    /// the workspaces and environments the organisation's (404 otherwise); a disabled user is
    /// a 409. The same limits as any issuance apply (active tokens per user, unique names).
    #[oai(
        path = "/organisations/:organisationId/users/:userId/tokens",
        method = "post",
        operation_id = "issueUserToken",
        transform = "issue_user_token"
    )]
    async fn issue(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "userId")] user_id: Path<String>,
        body: Idempotent<JsonBody<UserTokenRequest>>,
    ) -> Result<IssueUserTokenResponse, ChangeTokenErrors> {
        let credential = services
            .admin_issue_user_token(
                &auth.0,
                &organisation_id,
                &user_id,
                body.input.value,
                &body.write,
            )
            .await?;
        let envelope = IssuedCredentialEnvelope {
            credential: credential.into(),
        };
        Ok(IssueUserTokenResponse::Ok(Json(envelope)))
    }

    /// List an organisation's tokens
    ///
    /// Requires `admin:read` and a user who administers the organisation. Every filter
    /// narrows the list; either time filter leaves out revoked and expired tokens. In the order
    /// the tokens were issued, at most `limit` per page; never a secret.
    #[oai(
        path = "/organisations/:organisationId/tokens",
        method = "get",
        operation_id = "listTokens",
        transform = "list_tokens"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        /// Only this user's tokens.
        #[oai(name = "userId")]
        user_id: Query<Option<Uuid>>,
        /// Only tokens with an active grant on this workspace.
        #[oai(name = "workspaceId")]
        workspace_id: Query<Option<Uuid>>,
        /// Only live tokens expiring within this many seconds.
        #[oai(
            name = "expiringWithinSeconds",
            validator(minimum(value = "0"), maximum(value = "316224000"))
        )]
        expiring_within: Query<Option<i64>>,
        /// Only live tokens unused for this many seconds (never used ones: issued that long ago).
        #[oai(
            name = "unusedForSeconds",
            validator(minimum(value = "0"), maximum(value = "316224000"))
        )]
        unused_for: Query<Option<i64>>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListTokensResponse, ReadTokensErrors> {
        let listing = TokenListing {
            user_id: user_id.0,
            workspace_id: workspace_id.0,
            expiring_within: span("expiringWithinSeconds", expiring_within.0)
                .map_err(|e| ApiFailure::validation(&e.into()))?,
            unused_for: span("unusedForSeconds", unused_for.0)
                .map_err(|e| ApiFailure::validation(&e.into()))?,
        };
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let page = services
            .admin_list_tokens(&auth.0, &organisation_id, &listing, page)
            .await?;
        Ok(ListTokensResponse::Ok(Json(page.into())))
    }

    /// Show a token
    ///
    /// Requires `admin:read` and a user who administers the organisation. The token in any
    /// state, with its last use; never its secret. A token of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/tokens/:tokenId",
        method = "get",
        operation_id = "getToken",
        transform = "get_token"
    )]
    async fn show(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "tokenId")] token_id: Path<String>,
    ) -> Result<GetTokenResponse, ReadTokensErrors> {
        let token = services
            .admin_get_token(&auth.0, &organisation_id, &token_id)
            .await?;
        Ok(GetTokenResponse::Ok(Json(TokenEnvelope {
            token: token.into(),
        })))
    }

    /// Revoke a token
    ///
    /// Requires `admin:write` and a user who administers the organisation; an operator's
    /// tokens are revoked only by an operator. Without `workspaceId` the token loses every
    /// workspace and is revoked; with it, that workspace only (404 when the token has no access
    /// to it). With `cascade: true`, every token it issued, transitively, loses the same access
    /// in the same transaction. Takes effect at once on every replica.
    #[oai(
        path = "/organisations/:organisationId/tokens/:tokenId/revoke",
        method = "post",
        operation_id = "revokeToken",
        transform = "revoke_token"
    )]
    async fn revoke(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "tokenId")] token_id: Path<String>,
        body: Idempotent<JsonBody<AdminRevocation>>,
    ) -> Result<AdminRevokeResponse, ChangeTokenErrors> {
        let outcome = services
            .admin_revoke_token(
                &auth.0,
                &organisation_id,
                &token_id,
                body.input.value,
                &body.write,
            )
            .await?;
        Ok(AdminRevokeResponse::Ok(Json(outcome.into())))
    }

    /// Rotate a token
    ///
    /// Requires `admin:write` and a user who administers the organisation; an operator's
    /// tokens are rotated only by an operator. The token keeps its id, grants, scopes and
    /// expiry and gets a new secret, shown only here; the replaced secret authenticates until
    /// `previousValidUntil` (at most 30 days). A revoked or expired token, or a disabled
    /// user's, is a 409.
    #[oai(
        path = "/organisations/:organisationId/tokens/:tokenId/rotate",
        method = "post",
        operation_id = "rotateToken",
        transform = "rotate_token"
    )]
    async fn rotate(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "tokenId")] token_id: Path<String>,
        body: Idempotent<JsonBody<Rotation>>,
    ) -> Result<RotateTokenResponse, ChangeTokenErrors> {
        let Rotation(grace) = body.input.value;
        let rotated = services
            .admin_rotate_token(&auth.0, &organisation_id, &token_id, grace, &body.write)
            .await?;
        Ok(RotateTokenResponse::Ok(Json(rotated.into())))
    }
}
