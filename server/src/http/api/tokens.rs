//! POST /v1/personal-access-tokens and DELETE /v1/workspaces/{workspaceId}/access-tokens/{tokenId}.

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use crate::domain::Operation;
use crate::domain::{
    ExpiresInDays, RevocationReason, Scope, Scopes, Timestamp, TokenName, ValidationErrors,
};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::error_responses;
use crate::http::fields::{List, request_body};
use crate::http::idempotency::{Idempotent, Permitted, path_id};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{IssueTokenInput, IssuedCredential, Permission, Services};

request_body! {
    /// Request body of token issuance. No other properties are allowed.
    pub struct PersonalAccessTokenInput {
        "name" => name: required TokenName,
        /// Scopes of the new token; each must be held by the caller's token.
        "scopes" => scopes: required List<Scope>,
        "organisationId" => organisation_id: required Uuid,
        /// Workspaces of the new token; each must be one of the caller's.
        "workspaceIds" => workspace_ids: required List<Uuid, 1>,
        /// Environments within those workspaces; empty means all of them.
        "environmentIds" => environment_ids: default List<Uuid>,
        "expiresInDays" => expires_in_days: default ExpiresInDays,
    }
}

impl FromJson for IssueTokenInput {
    type Body = PersonalAccessTokenInput;

    fn from_body(body: PersonalAccessTokenInput) -> Result<Self, ValidationErrors> {
        IssueTokenInput::new(
            body.name,
            body.scopes.0.into_iter().collect::<Scopes>(),
            body.organisation_id,
            body.workspace_ids.0,
            body.environment_ids.0,
            body.expires_in_days,
        )
    }
}

impl Permitted for IssueTokenInput {
    fn permission<'a>(&'a self, _req: &'a poem::Request) -> Permission<'a> {
        Permission::IssueToken(self)
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct IssuedCredentialEnvelope {
    pub(super) credential: IssuedCredentialBody,
}

#[derive(Object)]
#[oai(rename = "IssuedCredential", rename_all = "camelCase")]
pub struct IssuedCredentialBody {
    id: Uuid,
    name: String,
    /// The token's non-secret leading part, shown in listings and logs.
    prefix: String,
    scopes: Vec<String>,
    organisation_id: Uuid,
    workspace_ids: Vec<Uuid>,
    environment_ids: Vec<Uuid>,
    created_at: Timestamp,
    expires_at: Timestamp,
    /// The secret. Returned only here (and on an exact idempotent replay); store it now.
    token: String,
}

impl From<IssuedCredential> for IssuedCredentialBody {
    fn from(c: IssuedCredential) -> Self {
        Self {
            id: c.record.id,
            name: c.record.name,
            prefix: c.prefix,
            scopes: c.record.scopes,
            organisation_id: c.record.organisation_id,
            workspace_ids: c.record.workspace_ids,
            environment_ids: c.record.environment_ids,
            created_at: c.record.created_at.into(),
            expires_at: c.record.expires_at.into(),
            token: c.secret.expose().to_owned(),
        }
    }
}

request_body! {
    /// Request body of revocation.
    pub struct RevokeAccessTokenInput {
        /// Why the access is revoked; kept in the audit log.
        "reason" => reason: required RevocationReason,
        /// Also revoke this workspace's access of every token issued by this token,
        /// transitively, that holds it (each with its own audit event), in the same
        /// transaction.
        "cascade" => cascade: default bool,
    }
}

/// A parsed revocation request.
#[derive(Debug)]
pub struct RevokeRequest {
    reason: RevocationReason,
    cascade: bool,
}

impl FromJson for RevokeRequest {
    type Body = RevokeAccessTokenInput;

    fn from_body(body: RevokeAccessTokenInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            reason: body.reason,
            cascade: body.cascade,
        })
    }
}

impl Permitted for RevokeRequest {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        Permission::RevokeToken {
            workspace: path_id(req, "workspaceId"),
            token: path_id(req, "tokenId"),
        }
    }
}

#[derive(Object)]
pub struct TokenRevocationResult {
    /// Always true on success.
    revoked: bool,
}

#[derive(ApiResponse)]
pub enum IssueTokenResponse {
    /// The token was issued; `credential.token` is the secret.
    #[oai(status = 200)]
    Ok(Json<IssuedCredentialEnvelope>),
}

#[derive(ApiResponse)]
pub enum RevokeTokenResponse {
    /// The token no longer has access to the workspace.
    #[oai(status = 200)]
    Ok(Json<TokenRevocationResult>),
}

error_responses!(IssueTokenErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);
error_responses!(RevokeTokenErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

fn issue_token(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::IssueToken, ep)
}

fn revoke_token(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RevokeToken, ep)
}

pub struct TokensApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Tokens")]
impl TokensApi {
    /// Issue a personal access token
    ///
    /// Requires `tokens:issue`. The new token's organisation must be the caller's, and its
    /// workspaces, environments and scopes within the caller's (403 otherwise). An unknown
    /// organisation, workspace or environment and anything of another organisation are the
    /// same 404.
    ///
    /// A token never outlives the token that issued it: the new token's `expiresAt` is
    /// `min(createdAt + expiresInDays days, the caller's token's expiresAt)`. A request the cap
    /// shortens still succeeds; the response shows the capped `expiresAt`.
    #[oai(
        path = "/personal-access-tokens",
        method = "post",
        operation_id = "issuePersonalAccessToken",
        transform = "issue_token"
    )]
    async fn issue(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        body: Idempotent<JsonBody<IssueTokenInput>>,
    ) -> Result<IssueTokenResponse, IssueTokenErrors> {
        let credential = services
            .issue_token(&auth.0, body.input.value, &body.write)
            .await?;
        let envelope = IssuedCredentialEnvelope {
            credential: credential.into(),
        };
        Ok(IssueTokenResponse::Ok(Json(envelope)))
    }

    /// Revoke a token's access to a workspace
    ///
    /// Requires `tokens:revoke` on the workspace. The token keeps its other workspaces; a token
    /// left with none is revoked entirely. Takes effect at once. 404 when the token has no
    /// access to that workspace (a token or workspace of another organisation is the same 404
    /// or 403 as an id that does not exist). With `cascade: true`, every token issued by this
    /// token, transitively, that holds the workspace loses it too. A caller limited to some
    /// environments may revoke only tokens limited to environments within its own (403
    /// otherwise; a token without an environment limit reaches every environment).
    #[oai(
        path = "/workspaces/:workspaceId/access-tokens/:tokenId",
        method = "delete",
        operation_id = "revokeWorkspaceAccessToken",
        transform = "revoke_token"
    )]
    async fn revoke(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        #[oai(name = "tokenId")] token_id: Path<String>,
        body: Idempotent<JsonBody<RevokeRequest>>,
    ) -> Result<RevokeTokenResponse, RevokeTokenErrors> {
        let RevokeRequest { reason, cascade } = body.input.value;
        services
            .revoke_token_access(
                &auth.0,
                &workspace_id,
                &token_id,
                reason,
                cascade,
                &body.write,
            )
            .await?;
        let result = TokenRevocationResult { revoked: true };
        Ok(RevokeTokenResponse::Ok(Json(result)))
    }
}
