//! The service layer: every rule of every operation lives here.
//!
//! HTTP handlers and `cpctl` commands parse their input into domain types, call one method
//! of [`Services`], and render the result. Each operation group has its own file.

mod activity;
mod admin;
mod admin_tokens;
mod audit;
pub mod audit_integrity;
mod authz;
mod background_passes;
mod batch_queue;
mod caller;
mod commands;
mod deliveries;
mod delivery_admin;
mod directory;
mod dispatcher;
mod error;
mod fair_share;
mod fleet;
mod keys;
mod offboarding;
mod permissions;
mod policies;
mod policy_budgets;
mod policy_decisions;
mod reviews;
mod rotation;
mod runner_admin;
mod runner_auth;
mod runner_secrets;
mod runners;
mod stream_permits;
mod token_hygiene;
mod tokens;
mod users;
mod workflows;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::domain::{RecordCipher, TokenHasher, WebhookSigner};
use crate::policy::PolicyRuntime;
use crate::storage::{AuditFeed, AuditStore, NonceStore, ReplicaReads, SharedRecordStore};

pub use activity::{ActivityPage, PageRequest};
pub use admin::{Bootstrap, BootstrapInput, UserRef};
pub use admin_tokens::{AdminRevocation, UserTokenRequest};
pub use audit::{EVENT_TYPES_PATTERN, StreamEnd, StreamItem, StreamRequest};
#[cfg(feature = "bench-allow-all")]
pub use authz::AllowAllAuthorizer;
pub use authz::{Authorizer, AuthzRequest, Decision, DenyStatus, Operation};
pub use background_passes::{BackgroundPasses, BackgroundTask};
pub use commands::{
    DeliveryStatusInput, SubmitCommandInput, TIMEOUT_BATCH, TimeoutSweep, command_deadline,
};
pub use deliveries::{AttemptAnswer, DeliverySettings, dispatch_body};
pub use delivery_admin::{RECOVER_LIMIT, Resent};
pub use directory::{AdminPage, Paged};
pub use dispatcher::Dispatcher;
pub use error::ServiceError;
pub use fair_share::BreakerSettings;
pub use fleet::{RunnerChange, RunnerKeyAdded};
pub use keys::{
    KeySet, KeySource, RECORD_KEYS, WEBHOOK_KEYS, load_keys, load_secrets_cipher, load_token_hasher,
};
pub use offboarding::{USER_DISABLED, USER_ENABLED, USER_ROLE_CHANGED, UserChange, UserOverview};
pub use permissions::{Permission, ReplayCheck};
pub use policies::{CompiledCache, PolicyListing, parse_reference};
pub use policy_budgets::{
    ActivatedPolicy, InstalledPolicy, POLICY_NAME_PATTERN, PolicyUpload, PolicyUploadAdmission,
    budget_json, is_policy_name,
};
pub use policy_decisions::{
    DECISION_CURSOR_PATTERN, DECISION_LIST_MAX, DecisionListing, DecisionLogSettings,
    DecisionRecorder,
};
pub use reviews::{
    ModeratedReview, RESTORE_REASON_MAX, ReportReviewInput, ReviewInput, decision_of,
};
pub use rotation::{MAX_ROTATION_GRACE_DAYS, RotatedToken, TOKEN_ROTATED};
pub use runner_admin::DisableRule;
pub use runner_auth::{RunnerPrincipal, SignedRequest};
pub use runner_secrets::{MAX_SECRET_OVERLAP, RotatedSecret};
pub use runners::{DeletePoolInput, RegisteredRunner, bounded_text};
pub use stream_permits::{
    STREAM_RETRY_AFTER, StreamCapReached, StreamLimits, StreamPermit, StreamPermits, StreamScope,
};
pub use token_hygiene::{
    LAST_USE_WINDOW, LastUseRecorder, TOKEN_EXPIRING, TokenListing, USER_AGENT_MAX,
    bounded_user_agent,
};
pub use tokens::{IssueTokenInput, IssuedCredential};
pub use workflows::DECISION_REASON_MAX;

/// Limits the service enforces; each has a configuration flag.
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    pub max_active_tokens_per_user: u32,
    /// Words the moderation policy rejects reviews for (passed to it with every review).
    pub moderation_blocklist: Vec<String>,
    /// Caps on open audit streams, their age, and the replay's page size.
    pub audit_streams: StreamLimits,
    /// Where and when webhook deliveries are sent.
    pub deliveries: DeliverySettings,
}

impl Default for ServiceSettings {
    fn default() -> Self {
        Self {
            max_active_tokens_per_user: 500,
            moderation_blocklist: Vec::new(),
            audit_streams: StreamLimits::default(),
            deliveries: DeliverySettings::default(),
        }
    }
}

/// Where runner nonces are remembered: the store, and the key prefix that isolates one
/// deployment's (or one test's) keys.
pub struct NonceDeps {
    pub store: Arc<dyn NonceStore>,
    pub key_prefix: String,
}

/// What the service layer is built from, all at once: nothing is attached later. Each field
/// names the operation groups (files of this module) that use it.
pub struct ServiceDeps {
    /// Every group.
    pub store: SharedRecordStore,
    /// audit and activity: a read replica for activity pages and stream replays (`None`: the
    /// store).
    pub replica: Option<Arc<ReplicaReads>>,
    /// Every group's authorization check (`authorize`, in tokens): usually the policy runtime.
    pub authorizer: Arc<dyn Authorizer>,
    /// tokens: the keyed hash of token secrets (issuance and authentication).
    pub hasher: TokenHasher,
    /// policies (install, activate, reload) and reviews (moderation). `None`: policy
    /// operations fail and every review is held.
    pub policies: Option<Arc<PolicyRuntime>>,
    /// runners: signed delivery reports spend nonces here. `None` (`cpctl`, which verifies no
    /// signature): signed reports answer 503.
    pub nonces: Option<NonceDeps>,
    /// tokens (active token limit) and reviews (moderation blocklist).
    pub settings: ServiceSettings,
    /// runners: signs the webhooks sent to runners; its public keys are published (JWKS).
    pub webhook_signer: Arc<WebhookSigner>,
    /// runners: seals each runner's webhook secret in the records store.
    pub secrets: RecordCipher,
}

/// The service layer's dependencies, built once at start-up and shared by every request.
/// Fields are grouped by the operation groups that use them.
pub struct Services {
    // Every group.
    store: SharedRecordStore,
    // activity and audit: where pages and stream replays are read (the replica or `store`).
    reads: Arc<dyn AuditStore>,
    replica: Option<Arc<ReplicaReads>>,
    authorizer: Arc<dyn Authorizer>,
    // tokens.
    hasher: TokenHasher,
    // tokens and reviews.
    settings: ServiceSettings,
    // policies and reviews.
    policies: Option<Arc<PolicyRuntime>>,
    // policies: each version compiled once per process.
    compiled: CompiledCache,
    // audit: the live fan-out of this process, read from `store`.
    feed: Arc<AuditFeed>,
    // audit: the caps on open streams (counted in this process).
    stream_permits: Arc<StreamPermits>,
    // runners.
    nonces: Option<NonceDeps>,
    // runners: outgoing webhooks, and the published keys.
    webhook_signer: Arc<WebhookSigner>,
    // runners: seals runners' webhook secrets.
    secrets: RecordCipher,
    // audit: bumped each time this process's policies are reloaded, so open streams ask the
    // new authorizer at once.
    policy_reloads: tokio::sync::watch::Sender<u64>,
    // policies: one reload at a time, so a slow one cannot install an older state after a
    // newer one (the watcher and an explicit reload race on every change).
    reloading: Arc<tokio::sync::Mutex<()>>,
    // runners, tokens: when each background task last completed a pass (`/metrics`).
    passes: BackgroundPasses,
}

impl Services {
    pub fn new(deps: ServiceDeps) -> Self {
        let ServiceDeps {
            store,
            replica,
            authorizer,
            hasher,
            policies,
            nonces,
            settings,
            webhook_signer,
            secrets,
        } = deps;
        Self {
            feed: AuditFeed::new(store.clone()),
            stream_permits: StreamPermits::new(settings.audit_streams),
            reads: match &replica {
                Some(replica) => replica.clone(),
                None => store.clone(),
            },
            replica,
            store,
            authorizer,
            hasher,
            settings,
            policies,
            compiled: CompiledCache::default(),
            nonces,
            webhook_signer,
            secrets,
            policy_reloads: tokio::sync::watch::Sender::new(0),
            reloading: Arc::default(),
            passes: BackgroundPasses::new(),
        }
    }

    /// When each background task last completed a pass.
    pub fn background_passes(&self) -> &BackgroundPasses {
        &self.passes
    }

    /// The live audit fan-out of this process.
    pub fn audit_feed(&self) -> &Arc<AuditFeed> {
        &self.feed
    }

    /// The signer of webhooks sent to runners (the dispatcher signs with it; `/.well-known/jwks.json`
    /// and `cpctl webhooks keys` publish its public keys).
    pub fn webhook_signer(&self) -> &Arc<WebhookSigner> {
        &self.webhook_signer
    }

    pub fn store(&self) -> &SharedRecordStore {
        &self.store
    }

    /// The read replica, when one is configured (its health for `/readyz` and metrics).
    pub fn read_replica(&self) -> Option<&Arc<ReplicaReads>> {
        self.replica.as_ref()
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
