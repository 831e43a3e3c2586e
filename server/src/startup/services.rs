//! The service layer from the configuration: its keys, its settings and its policy engine,
//! with the built-in policies and then the store's active ones. The server and `cpctl` build
//! it the same way (`open_services` is cpctl's, without fast state).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::stores::{key_encryption_key, open_store};
use crate::config::ServerConfig;
use crate::domain::KeyEncryptionKey;
use crate::policy::{
    Disagreement, EngineSettings, PolicyEngine, PolicyKind, PolicyRuntime, WarmSettings, defaults,
};
use crate::service::{
    Authorizer, BreakerSettings, DecisionLogSettings, DecisionRecorder, DeliverySettings,
    DisableRule, NonceDeps, ServiceDeps, ServiceSettings, Services, StreamLimits, WEBHOOK_KEYS,
    load_keys, load_secrets_cipher, load_token_hasher,
};
use crate::storage::{DisagreementRecord, ReplicaReads, SharedRecordStore};

/// Opens the records store, applies migrations and builds the service layer without fast
/// state (signed runner reports need it): what `cpctl` needs.
pub async fn open_services(config: &ServerConfig) -> anyhow::Result<Arc<Services>> {
    // The store first: a store that does not answer leaves no key file behind (in DATA_DIR
    // with Postgres, wherever the command was run from).
    let store = open_store(config).await?;
    let kek = key_encryption_key(config)?;
    build_services(config, store, None, None, &kek).await
}

pub(super) async fn build_services(
    config: &ServerConfig,
    store: SharedRecordStore,
    replica: Option<Arc<ReplicaReads>>,
    nonces: Option<NonceDeps>,
    kek: &KeyEncryptionKey,
) -> anyhow::Result<Arc<Services>> {
    let (hasher, source) = load_token_hasher(store.as_ref(), kek, config.token_hash_key.as_deref())
        .await
        .context("could not load the token hashing key")?;
    source.warn_if_generated("token hashing key", "CP_TOKEN_HASH_KEY");
    let configured = config.webhook_signing_keys.as_deref();
    let (webhook_signer, source) = load_keys(store.as_ref(), kek, configured, &WEBHOOK_KEYS)
        .await
        .context("could not load the webhook signing keys")?;
    source.warn_if_generated("webhook signing key", "CP_WEBHOOK_SIGNING_KEYS");
    let secrets = load_secrets_cipher(store.as_ref(), kek)
        .await
        .context("could not load the runner secret key")?;
    let settings = ServiceSettings {
        max_active_tokens_per_user: config.max_active_tokens_per_user,
        moderation_blocklist: config
            .moderation_blocklist
            .iter()
            .map(|w| w.trim().to_lowercase())
            .filter(|w| !w.is_empty())
            .collect(),
        audit_streams: StreamLimits {
            per_token: config.audit_streams_per_token,
            per_workspace: config.audit_streams_per_workspace,
            per_organisation: config.audit_streams_per_organisation,
            per_process: config.audit_streams_per_process,
            max_age: Duration::from_secs(config.audit_stream_max_age_secs),
            replay_page: config.audit_stream_replay_page,
        },
        deliveries: DeliverySettings {
            egress: config.delivery_egress(),
            schedule: config.delivery_retry_schedule.clone(),
            connect_timeout: Duration::from_millis(config.delivery_connect_timeout_ms),
            total_timeout: Duration::from_millis(config.delivery_timeout_ms),
            concurrency: config.delivery_concurrency as usize,
            per_pool: config.delivery_per_pool as usize,
            per_organisation: config.delivery_per_organisation as usize,
            breaker: BreakerSettings {
                after: config.delivery_breaker_after,
                cool_down: Duration::from_millis(config.delivery_breaker_cooldown_ms),
                slow: Duration::from_millis(config.delivery_slow_ms),
            },
            disable: DisableRule {
                failures: config.runner_disable_after_failures,
                failing_for: Duration::from_secs(config.runner_disable_failing_secs),
            },
            poll: Duration::from_millis(config.delivery_poll_ms),
        },
    };
    let deadline = Duration::from_millis(config.policy_deadline_ms);
    let max_concurrent = config
        .policy_concurrency
        .unwrap_or_else(EngineSettings::default_concurrency)
        .max(1);
    let warm_defaults = WarmSettings::default_for(max_concurrent);
    let engine = PolicyEngine::new(EngineSettings {
        deadline,
        memory_bytes: config.policy_memory_mib << 20,
        max_concurrent,
        queue_timeout: config
            .policy_queue_timeout_ms
            .map(Duration::from_millis)
            .unwrap_or_else(|| EngineSettings::default_queue_timeout(deadline)),
        shadow_queue: config.policy_shadow_queue as usize,
        allocation: config.policy_instance_allocation,
        cache_dir: Some(config.policy_cache_dir()),
        warm: WarmSettings {
            max_decisions: config.policy_warm_decisions,
            max_age: Duration::from_secs(config.policy_warm_seconds),
            per_organisation: config
                .policy_warm_per_organisation
                .map_or(warm_defaults.per_organisation, |n| n as usize),
            total: config
                .policy_warm_total
                .map_or(warm_defaults.total, |n| n as usize),
        },
    })
    .map_err(anyhow::Error::msg)?;
    let authorizer_default = engine
        .compile(PolicyKind::Authorizer, defaults::AUTHORIZER)
        .map_err(|e| anyhow::anyhow!("the built-in authorizer does not compile: {e}"))?;
    let moderator_default = engine
        .compile(PolicyKind::Moderator, defaults::MODERATOR)
        .map_err(|e| anyhow::anyhow!("the built-in moderator does not compile: {e}"))?;
    let runtime = Arc::new(PolicyRuntime::new(
        engine,
        authorizer_default,
        moderator_default,
    )?);
    runtime.set_decision_log(DecisionRecorder::start(
        store.clone(),
        DecisionLogSettings {
            sample: config.policy_decision_sample,
            max_rows: config.policy_decision_max_rows,
            max_age: config.policy_decision_max_age,
        },
    )?);
    let sink_store = store.clone();
    runtime.set_disagreement_sink(Arc::new(move |d: Disagreement| {
        let store = sink_store.clone();
        let record = DisagreementRecord {
            shadow_digest: d.shadow_digest,
            operation: d.operation.to_owned(),
            principal_id: d.principal_id,
            active_decision: d.active,
            shadow_decision: d.shadow,
            occurred_at: chrono::Utc::now(),
        };
        tokio::spawn(async move {
            if let Err(e) = store.record_disagreement(&record).await {
                tracing::warn!(error = %e, "could not record a shadow disagreement");
            }
        });
    }));
    #[cfg(feature = "bench-allow-all")]
    let authorizer: Arc<dyn Authorizer> = if config.authorizer == "allow-all" {
        tracing::warn!("authorizer is allow-all: every request is authorized; for benchmarks only");
        Arc::new(crate::service::AllowAllAuthorizer)
    } else {
        runtime.clone()
    };
    #[cfg(not(feature = "bench-allow-all"))]
    let authorizer: Arc<dyn Authorizer> = runtime.clone();
    let services = Arc::new(Services::new(ServiceDeps {
        store,
        replica,
        authorizer,
        hasher,
        policies: Some(runtime),
        nonces,
        settings,
        webhook_signer: Arc::new(webhook_signer),
        secrets,
    }));
    services
        .reload_policies()
        .await
        .context("could not load the active policies")?;
    Ok(services)
}

/// A build without the `bench-allow-all` feature has no allow-all authorizer. A deployment that
/// still sets `CP_AUTHORIZER` is refused at start-up rather than ignored, so nobody believes
/// authorization is off (or on) by mistake; `--authorizer` is an unknown flag to clap.
pub(super) fn refuse_allow_all() -> anyhow::Result<()> {
    if cfg!(not(feature = "bench-allow-all")) && std::env::var_os("CP_AUTHORIZER").is_some() {
        anyhow::bail!(
            "CP_AUTHORIZER is not supported by this build: every request is authorized by the \
             active policy (the allow-all authorizer exists only in benchmark builds, \
             --features bench-allow-all); unset it"
        );
    }
    Ok(())
}
