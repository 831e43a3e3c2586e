//! Bearer authentication: the host's job, before any authorization question is asked.

use std::sync::Arc;

use poem::Request;
use poem_openapi::SecurityScheme;
use poem_openapi::auth::Bearer;

use super::error::ApiFailure;
use crate::domain::Principal;
use crate::service::Services;

/// A personal access token: `Authorization: Bearer cpat_...`.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", bearer_format = "cpat", checker = "authenticate")]
pub struct BearerAuth(pub Principal);

async fn authenticate(req: &Request, bearer: Bearer) -> poem::Result<Principal> {
    let services = req
        .data::<Arc<Services>>()
        .ok_or_else(ApiFailure::internal)?;
    services
        .authenticate(&bearer.token)
        .await
        .map_err(|e| ApiFailure::from(e).into())
}
