//! GET /v1/me: who the caller's token is, for `cpctl login` and `cpctl whoami`.

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use crate::domain::{Operation, Principal, Role, Timestamp};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::error_responses;
use crate::service::Services;

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

// 400 and 413: refusals of the request context before routing (a bad correlation id, a body
// declared past the limit), which every operation can answer.
error_responses!(CallerErrors: 400, 401, 403, 413, 429, 500, 503);

fn get_caller(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::GetCaller, ep)
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
}
