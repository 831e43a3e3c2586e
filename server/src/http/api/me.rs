//! `/v1/me`: who the caller's token is, for `cpctl login` and `cpctl whoami`, and the
//! self-service of its own user's tokens: list them, revoke one. Thin: the rules are
//! `service/caller.rs`'s.

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use super::admin_tokens::{AdminRevocationBody, AdminRevokeInput, TokenPageBody, span};
use crate::domain::{Operation, Principal, Role, Timestamp, ValidationErrors};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::http::idempotency::{Idempotent, Permitted, path_id};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{AdminPage, AdminRevocation, Permission, Services, TokenListing};

/// A revocation of one of the caller's own tokens: the body of an administrator's revocation.
#[derive(Debug)]
pub struct OwnRevocation(AdminRevocation);

impl FromJson for OwnRevocation {
    type Body = AdminRevokeInput;

    fn from_body(body: AdminRevokeInput) -> Result<Self, ValidationErrors> {
        AdminRevocation::from_body(body).map(Self)
    }
}

impl Permitted for OwnRevocation {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        Permission::RevokeOwnToken {
            token: path_id(req, "tokenId"),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CallerEnvelope {
    caller: CallerBody,
}

#[derive(Object)]
#[oai(rename = "Caller", rename_all = "camelCase")]
pub struct CallerBody {
    token_id: Uuid,
    user_id: Uuid,
    organisation_id: Uuid,
    role: Role,
    /// The scopes the token holds now: an admin scope its user's role no longer allows is
    /// left out.
    scopes: Vec<String>,
    /// Workspaces whose grant is still active, in grant order.
    workspace_ids: Vec<Uuid>,
    /// Environments the token is limited to; empty means all of its workspaces'.
    environment_ids: Vec<Uuid>,
    expires_at: Timestamp,
}

impl From<Principal> for CallerBody {
    fn from(p: Principal) -> Self {
        Self {
            token_id: p.token_id,
            user_id: p.user_id,
            organisation_id: p.organisation_id,
            role: p.role,
            scopes: p.scopes.to_strings(),
            workspace_ids: p.workspace_ids,
            environment_ids: p.environment_ids,
            expires_at: p.expires_at.into(),
        }
    }
}

#[derive(ApiResponse)]
pub enum CallerResponse {
    /// The caller's token, user and what they hold now.
    #[oai(status = 200)]
    Ok(Json<CallerEnvelope>),
}

#[derive(ApiResponse)]
pub enum ListOwnTokensResponse {
    #[oai(status = 200)]
    Ok(Json<TokenPageBody>),
}

#[derive(ApiResponse)]
pub enum RevokeOwnTokenResponse {
    /// The access is revoked.
    #[oai(status = 200)]
    Ok(Json<AdminRevocationBody>),
}

// 400 and 413: refusals of the request context before routing (a bad correlation id, a body
// declared past the limit), which every operation can answer.
error_responses!(CallerErrors: 400, 401, 403, 413, 429, 500, 503);
error_responses!(RevokeOwnTokenErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

fn get_caller(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::GetCaller, ep)
}

fn list_own_tokens(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListOwnTokens, ep)
}

fn revoke_own_token(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RevokeOwnToken, ep)
}

pub struct MeApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Tokens")]
impl MeApi {
    /// Who the caller is
    ///
    /// Any live token may ask, whatever its scopes: the token's id, its user, the user's role,
    /// and the scopes, workspaces and environments the token holds now. Not part of the v1
    /// contract's ten operations: the first operation of the admin plane.
    #[oai(
        path = "/me",
        method = "get",
        operation_id = "getAuthenticatedCaller",
        transform = "get_caller"
    )]
    async fn me(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
    ) -> Result<CallerResponse, CallerErrors> {
        let caller = services.caller(&auth.0).await?;
        let envelope = CallerEnvelope {
            caller: caller.into(),
        };
        Ok(CallerResponse::Ok(Json(envelope)))
    }

    /// List the caller's own tokens
    ///
    /// Any live token may ask, whatever its scopes: every token of the caller's user, in any
    /// state, with its last use and never its secret; no other user's. Either time filter
    /// leaves out revoked and expired tokens. In the order the tokens were issued, at most
    /// `limit` per page.
    #[oai(
        path = "/me/tokens",
        method = "get",
        operation_id = "listOwnTokens",
        transform = "list_own_tokens"
    )]
    async fn list_tokens(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
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
    ) -> Result<ListOwnTokensResponse, CallerErrors> {
        let listing = TokenListing {
            user_id: None,
            workspace_id: None,
            expiring_within: span("expiringWithinSeconds", expiring_within.0)
                .map_err(|e| ApiFailure::validation(&e.into()))?,
            unused_for: span("unusedForSeconds", unused_for.0)
                .map_err(|e| ApiFailure::validation(&e.into()))?,
        };
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let page = services.list_own_tokens(&auth.0, &listing, page).await?;
        Ok(ListOwnTokensResponse::Ok(Json(page.into())))
    }

    /// Revoke one of the caller's own tokens
    ///
    /// Any live token may ask, whatever its scopes, for a token of its own user, itself
    /// included; another user's token is a 404, as one that does not exist. The body is an
    /// administrator's revocation's: without `workspaceId` the token loses every workspace and
    /// is revoked; with it, that workspace only (404 when the token has no access to it). With
    /// `cascade: true`, every token it issued, transitively, loses the same access. Takes
    /// effect at once on every replica.
    #[oai(
        path = "/me/tokens/:tokenId/revoke",
        method = "post",
        operation_id = "revokeOwnToken",
        transform = "revoke_own_token"
    )]
    async fn revoke_token(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "tokenId")] token_id: Path<String>,
        body: Idempotent<JsonBody<OwnRevocation>>,
    ) -> Result<RevokeOwnTokenResponse, RevokeOwnTokenErrors> {
        let OwnRevocation(revocation) = body.input.value;
        let outcome = services
            .revoke_own_token(&auth.0, &token_id, revocation, &body.write)
            .await?;
        Ok(RevokeOwnTokenResponse::Ok(Json(outcome.into())))
    }
}
