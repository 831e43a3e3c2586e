//! The service layer: every rule of every operation lives here.
//!
//! HTTP handlers and `cpctl` commands parse their input into domain types, call one method
//! of [`Services`], and render the result. Each operation group has its own file.

mod activity;
mod admin;
mod authz;
mod error;
mod keys;
mod policies;
mod tokens;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::domain::TokenHasher;
use crate::storage::SharedRecordStore;

pub use activity::{ActivityPage, PageRequest};
pub use admin::{Bootstrap, BootstrapInput};
pub use authz::{AllowAllAuthorizer, Authorizer, AuthzRequest, Decision, DenyStatus, Operation};
pub use error::ServiceError;
pub use keys::{KeySource, load_record_cipher, load_token_hasher};
pub use policies::{CompiledCache, parse_reference};
pub use tokens::{IssueTokenInput, IssuedCredential};

/// Limits the service enforces; each has a configuration flag.
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    pub max_active_tokens_per_user: u32,
}

impl Default for ServiceSettings {
    fn default() -> Self {
        Self {
            max_active_tokens_per_user: 500,
        }
    }
}

/// The service layer's dependencies, built once at start-up and shared by every request.
pub struct Services {
    store: SharedRecordStore,
    hasher: TokenHasher,
    authorizer: Arc<dyn Authorizer>,
    /// The policy engine's runtime (moderation, lifecycle); the authorizer is usually it too.
    policies: Option<Arc<crate::policy::PolicyRuntime>>,
    compiled: CompiledCache,
    settings: ServiceSettings,
}

impl Services {
    pub fn new(
        store: SharedRecordStore,
        hasher: TokenHasher,
        authorizer: Arc<dyn Authorizer>,
        policies: Option<Arc<crate::policy::PolicyRuntime>>,
        settings: ServiceSettings,
    ) -> Self {
        Self {
            store,
            hasher,
            authorizer,
            policies,
            compiled: CompiledCache::default(),
            settings,
        }
    }

    pub fn store(&self) -> &SharedRecordStore {
        &self.store
    }

    /// Is the records store answering?
    pub async fn ready(&self) -> Result<(), ServiceError> {
        Ok(self.store.ping().await?)
    }

    fn now() -> DateTime<Utc> {
        // Postgres keeps microseconds; truncating here makes stored and returned times equal.
        let now = Utc::now();
        DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now)
    }
}
