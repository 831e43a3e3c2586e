//! Bearer authentication: the host's job, before any authorization question is asked. The
//! request-context middleware authenticates once (the rate limit needs the principal); this
//! scheme hands its outcome to the handler and documents the scheme.

use std::sync::Arc;

use poem::Request;
use poem_openapi::SecurityScheme;
use poem_openapi::auth::Bearer;

use super::error::ApiFailure;
use crate::domain::Principal;
use crate::service::{ServiceError, Services};

/// What the middleware learnt from the `Authorization` header.
#[derive(Debug, Clone)]
pub enum AuthOutcome {
    Authenticated(Principal),
    Failed(ServiceError),
}

/// A personal access token: `Authorization: Bearer cpat_...`.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", bearer_format = "cpat", checker = "authenticate")]
pub struct BearerAuth(pub Principal);

async fn authenticate(req: &Request, bearer: Bearer) -> poem::Result<Principal> {
    match req.data::<AuthOutcome>() {
        Some(AuthOutcome::Authenticated(principal)) => Ok(principal.clone()),
        Some(AuthOutcome::Failed(e)) => Err(ApiFailure::from(e.clone()).into()),
        None => {
            let services = req
                .data::<Arc<Services>>()
                .ok_or_else(ApiFailure::internal)?;
            services
                .authenticate(&bearer.token)
                .await
                .map_err(|e| ApiFailure::from(e).into())
        }
    }
}
