//! POST /v1/personal-access-tokens and DELETE /v1/workspaces/{workspaceId}/access-tokens/{tokenId}.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use serde_json::Value;
use uuid::Uuid;

use super::ApiTags;
use crate::domain::{
    CorrelationId, ExpiresInDays, RevocationReason, Scope, Scopes, TokenName, ValidationErrors,
};
use crate::http::auth::BearerAuth;
use crate::http::error::error_responses;
use crate::http::idempotency::Idempotent;
use crate::http::payload::{FromJson, JsonBody, JsonObject};
use crate::service::{IssueTokenInput, IssuedCredential, Services};

/// Request body of token issuance. No other properties are allowed.
#[derive(Object)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // Documents the body; `IssueTokenInput::from_json` parses it.
pub struct PersonalAccessTokenInput {
    #[oai(validator(min_length = 1, max_length = 120))]
    name: String,
    /// Scopes of the new token; each must be held by the caller's token.
    scopes: Vec<ScopeName>,
    organisation_id: Uuid,
    /// Workspaces of the new token; each must be one of the caller's.
    #[oai(validator(min_items = 1))]
    workspace_ids: Vec<Uuid>,
    /// Environments within those workspaces; empty means all of them.
    #[oai(default)]
    environment_ids: Vec<Uuid>,
    #[oai(
        default = "default_expires_in_days",
        validator(minimum(value = "1"), maximum(value = "90"))
    )]
    expires_in_days: i64,
}

fn default_expires_in_days() -> i64 {
    ExpiresInDays::default().days()
}

/// Allowed scope values.
#[derive(Enum)]
#[allow(dead_code)] // Documentation of the closed list; parsing goes through `Scope::parse`.
pub enum ScopeName {
    #[oai(rename = "tokens:issue")]
    TokensIssue,
    #[oai(rename = "tokens:revoke")]
    TokensRevoke,
    #[oai(rename = "runner-pools:delete")]
    RunnerPoolsDelete,
    #[oai(rename = "runner-commands:submit")]
    RunnerCommandsSubmit,
    #[oai(rename = "audit:read")]
    AuditRead,
    #[oai(rename = "activity:read")]
    ActivityRead,
    #[oai(rename = "workflows:request-approval")]
    WorkflowsRequestApproval,
    #[oai(rename = "reviews:write")]
    ReviewsWrite,
    #[oai(rename = "reviews:report")]
    ReviewsReport,
}

impl FromJson for IssueTokenInput {
    type Schema = PersonalAccessTokenInput;

    fn from_json(value: Value) -> Result<Self, ValidationErrors> {
        let mut body = JsonObject::new(value)?;
        let name = body.string("name", true, TokenName::parse);
        let scopes = body.string_array("scopes", true, |s| {
            Scope::parse(s).map_err(|e| e.to_string())
        });
        let organisation_id = body.uuid("organisationId", true);
        let workspace_ids = body.uuid_array("workspaceIds", true);
        if workspace_ids.as_ref().is_some_and(Vec::is_empty) {
            body.reject(crate::domain::FieldError::new(
                "workspaceIds",
                "must contain at least 1 item",
            ));
        }
        let environment_ids = body.uuid_array("environmentIds", false);
        let expires = body.integer("expiresInDays", false, ExpiresInDays::parse);
        body.finish()?;
        match (name, scopes, organisation_id, workspace_ids) {
            (Some(name), Some(scopes), Some(org), Some(workspaces)) => IssueTokenInput::new(
                name,
                scopes.into_iter().collect::<Scopes>(),
                org,
                workspaces,
                environment_ids.unwrap_or_default(),
                expires.unwrap_or_default(),
            ),
            // Unreachable in practice: a missing value was recorded as an error above.
            _ => Err(crate::domain::FieldError::new("body", "is incomplete").into()),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct IssuedCredentialEnvelope {
    credential: IssuedCredentialBody,
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
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
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
            created_at: c.record.created_at,
            expires_at: c.record.expires_at,
            token: c.secret.expose().to_owned(),
        }
    }
}

/// Request body of revocation.
#[derive(Object)]
#[oai(deny_unknown_fields)]
#[allow(dead_code)] // Documents the body; `RevocationReason::from_json` parses it.
pub struct RevokeAccessTokenInput {
    /// Why the access is revoked; kept in the audit log.
    #[oai(validator(min_length = 1, max_length = 500))]
    reason: String,
}

impl FromJson for RevocationReason {
    type Schema = RevokeAccessTokenInput;

    fn from_json(value: Value) -> Result<Self, ValidationErrors> {
        let mut body = JsonObject::new(value)?;
        let reason = body.string("reason", true, RevocationReason::parse);
        body.finish()?;
        reason.ok_or_else(|| crate::domain::FieldError::new("reason", "is required").into())
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

pub struct TokensApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Tokens")]
impl TokensApi {
    /// Issue a personal access token
    ///
    /// Requires `tokens:issue`. The new token's organisation must be the caller's, and its
    /// workspaces, environments and scopes within the caller's (403 otherwise).
    #[oai(
        path = "/personal-access-tokens",
        method = "post",
        operation_id = "issuePersonalAccessToken"
    )]
    async fn issue(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        cid: Data<&CorrelationId>,
        body: Idempotent<JsonBody<IssueTokenInput>>,
    ) -> Result<IssueTokenResponse, IssueTokenErrors> {
        let credential = services.issue_token(&auth.0, body.0.value, &cid).await?;
        let envelope = IssuedCredentialEnvelope {
            credential: credential.into(),
        };
        Ok(IssueTokenResponse::Ok(Json(envelope)))
    }

    /// Revoke a token's access to a workspace
    ///
    /// Requires `tokens:revoke` on the workspace. The token keeps its other workspaces; a token
    /// left with none is revoked entirely. Takes effect at once. 404 when the token has no
    /// access to that workspace.
    #[oai(
        path = "/workspaces/:workspaceId/access-tokens/:tokenId",
        method = "delete",
        operation_id = "revokeWorkspaceAccessToken"
    )]
    async fn revoke(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        cid: Data<&CorrelationId>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        #[oai(name = "tokenId")] token_id: Path<String>,
        body: Idempotent<JsonBody<RevocationReason>>,
    ) -> Result<RevokeTokenResponse, RevokeTokenErrors> {
        services
            .revoke_token_access(&auth.0, &workspace_id, &token_id, body.0.value, &cid)
            .await?;
        let result = TokenRevocationResult { revoked: true };
        Ok(RevokeTokenResponse::Ok(Json(result)))
    }
}
