//! `GET /v1/me`: a token reads who it is, as authentication found it (its user's role now, and
//! only the scopes that role allows). The authorizer is asked like for every operation; the
//! default policy lets any live token ask. No read beyond authentication's.

use super::{Operation, ServiceError, Services};
use crate::domain::Principal;

impl Services {
    pub async fn caller(&self, principal: &Principal) -> Result<Principal, ServiceError> {
        self.authorize(principal, Operation::GetCaller, None, vec![])
            .await?;
        Ok(principal.clone())
    }
}
