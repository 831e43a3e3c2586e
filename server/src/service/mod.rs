//! The service layer: every rule of every operation lives here.
//!
//! HTTP handlers and `cpctl` commands parse their input into domain types, call one method
//! of [`Services`], and render the result. Each operation group has its own file.

mod activity;
mod admin;
mod audit;
mod authz;
mod error;
mod keys;
mod policies;
mod reviews;
mod runners;
mod tokens;
mod workflows;

use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};

use crate::domain::TokenHasher;
use crate::storage::{AuditFeed, NonceStore, SharedRecordStore};

pub use activity::{ActivityPage, PageRequest};
pub use admin::{Bootstrap, BootstrapInput};
pub use audit::StreamRequest;
pub use authz::{AllowAllAuthorizer, Authorizer, AuthzRequest, Decision, DenyStatus, Operation};
pub use error::ServiceError;
pub use keys::{KeySource, load_record_cipher, load_token_hasher};
pub use policies::{CompiledCache, parse_reference};
pub use reviews::{ModeratedReview, ReportReviewInput, ReviewInput, decision_of};
pub use runners::{
    DeletePoolInput, DeliveryStatusInput, RegisteredRunner, RunnerPrincipal, SignedRequest,
    SubmitCommandInput, bounded_text,
};
pub use tokens::{IssueTokenInput, IssuedCredential};

/// Limits the service enforces; each has a configuration flag.
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    pub max_active_tokens_per_user: u32,
    /// Words the moderation policy holds reviews for (passed to it with every review).
    pub moderation_blocklist: Vec<String>,
}

impl Default for ServiceSettings {
    fn default() -> Self {
        Self {
            max_active_tokens_per_user: 500,
            moderation_blocklist: Vec::new(),
        }
    }
}

/// Fast state the service layer uses itself: runner nonces (and the key prefix that isolates
/// one deployment's, or one test's, keys).
struct FastPorts {
    nonces: Arc<dyn NonceStore>,
    prefix: String,
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
    feed: Arc<AuditFeed>,
    fast: OnceLock<FastPorts>,
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
            feed: AuditFeed::new(store.clone()),
            store,
            hasher,
            authorizer,
            policies,
            compiled: CompiledCache::default(),
            settings,
            fast: OnceLock::new(),
        }
    }

    /// Connects the nonce store; without one, signed runner reports answer 503. Once only.
    pub fn set_nonce_store(&self, nonces: Arc<dyn NonceStore>, prefix: String) {
        let _ = self.fast.set(FastPorts { nonces, prefix });
    }

    fn nonces(&self) -> Option<&Arc<dyn NonceStore>> {
        self.fast.get().map(|f| &f.nonces)
    }

    fn key_prefix(&self) -> &str {
        self.fast.get().map_or("", |f| f.prefix.as_str())
    }

    /// The live audit fan-out of this process.
    pub fn audit_feed(&self) -> &Arc<AuditFeed> {
        &self.feed
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
