//! Builds the application from configuration and runs it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use poem::Server;
use poem::listener::{Acceptor, Listener, TcpAcceptor, TcpListener};

use crate::config::{RecordsLocation, ServerConfig};
use crate::domain::KeyEncryptionKey;
use crate::http::connections::{ConnectionLimits, LimitedAcceptor};
use crate::http::{HttpSettings, RateSettings, build_app};
use crate::policy::{
    Disagreement, EngineSettings, PolicyEngine, PolicyKind, PolicyRuntime, defaults,
};
use crate::service::{
    Authorizer, Bootstrap, BreakerSettings, DeliverySettings, Dispatcher, KeySource, NonceDeps,
    ServiceDeps, ServiceSettings, Services, StreamLimits, load_record_cipher, load_secrets_cipher,
    load_token_hasher, load_webhook_signer,
};
use crate::storage::{
    DisagreementRecord, FastState, MemoryFastState, OpenSettings, Opened, OutcomeStore,
    RedisFastState, SharedRecordStore, SqliteFastState, Topic,
};

pub struct Application {
    acceptor: TcpAcceptor,
    /// Bounds on the API listener's connections ([`connections`](crate::http::connections)).
    limits: ConnectionLimits,
    idle_timeout: Duration,
    endpoint: poem::endpoint::BoxEndpoint<'static>,
    /// `--ops-listen`: the operator's routes on a listener of their own.
    ops: Option<(TcpAcceptor, poem::endpoint::BoxEndpoint<'static>)>,
    services: Arc<Services>,
    /// Held while serving: the embedded store's one-process lock.
    _lock: Option<std::fs::File>,
}

/// The embedded store keeps rate limits and the audit fan-out in this process, so a second
/// server on the same file would split them: refuse it. `cpctl store copy` takes it too, so
/// no server writes to a store while it is copied.
pub fn lock_embedded_store(path: &std::path::Path) -> anyhow::Result<std::fs::File> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".server-lock");
    let file = crate::storage::embedded_files::open_private_file(std::path::Path::new(&lock_path))
        .with_context(|| {
            format!(
                "could not open {}",
                std::path::Path::new(&lock_path).display()
            )
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another control-plane server is already using {}: the embedded store serves one \
             process (rate limits live in it). To run several replicas, use \
             Postgres and Redis (set DATABASE_URL and REDIS_URL; see docs/operations.md)",
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("could not lock {}", path.display()))
        }
    }
}

/// On an empty store: bootstrap a development tenant (`--dev`), returned so its first steps are
/// printed once the listener is bound (its real port known), or log the command that
/// bootstraps one.
async fn first_start(
    config: &ServerConfig,
    services: &Services,
) -> anyhow::Result<Option<Bootstrap>> {
    if !services.list_organisations().await?.is_empty() {
        return Ok(None);
    }
    if config.dev {
        let done = services
            .bootstrap(
                crate::service::BootstrapInput {
                    organisation: "dev".into(),
                    workspace: "default".into(),
                    admin_email: "admin@localhost".into(),
                    expires_in_days: crate::domain::ExpiresInDays::default(),
                },
                &crate::domain::CorrelationId::generate(),
            )
            .await?;
        return Ok(Some(done));
    }
    tracing::warn!(
        command = %format!(
            "{}bootstrap --org ORG --workspace WORKSPACE --admin EMAIL",
            cpctl_invocation(&config.records())
        ),
        "the records store is empty: create the first organisation, workspace and admin token with this command (or restart with --dev)"
    );
    Ok(None)
}

/// `cpctl` reaching the same records store, with a trailing space. A Postgres URL may hold a
/// password: it is named, never written out.
pub fn cpctl_invocation(records: &RecordsLocation) -> String {
    match records {
        RecordsLocation::Postgres(_) => "DATABASE_URL=... cpctl ".to_owned(),
        RecordsLocation::Sqlite(path) => {
            format!("cpctl --database-url sqlite://{} ", path.display())
        }
    }
}

/// `http://HOST:PORT` for a listen address: an unspecified address (`0.0.0.0`, `::`) is
/// reached as `localhost`; anything else that is not `IP:PORT` is used as written.
pub fn base_url(listen: &str, port: Option<u16>) -> String {
    let Ok(addr) = listen.parse::<std::net::SocketAddr>() else {
        return format!("http://{listen}");
    };
    let port = port.unwrap_or(addr.port());
    match addr.ip() {
        ip if ip.is_unspecified() => format!("http://localhost:{port}"),
        std::net::IpAddr::V6(ip) => format!("http://[{ip}]:{port}"),
        std::net::IpAddr::V4(ip) => format!("http://{ip}:{port}"),
    }
}

/// What to try first with a freshly bootstrapped tenant: a ready-to-paste `curl` of its
/// activity, the documentation's address and the `cpctl` line for a narrower token. It holds
/// the token, so it is printed on stdout by `--dev` and `cpctl bootstrap`, never logged.
pub fn first_steps(base_url: &str, cpctl: &str, done: &Bootstrap) -> String {
    let workspace = done.workspace.id;
    format!(
        "Read the workspace's activity with this token:\n  \
         curl -s {base_url}/v1/workspaces/{workspace}/activity -H 'Authorization: Bearer {token}'\n\
         API documentation: {base_url}/docs\n\
         A token that may only read activity, for a script or a dashboard:\n  \
         {cpctl}tokens issue --user {user} --name activity-reader --scope activity:read \
         --workspace {workspace}\n",
        token = done.credential.secret.expose(),
        user = done.user.id,
    )
}

/// Opens the records store the configuration names and applies its migrations.
pub async fn open_store(config: &ServerConfig) -> anyhow::Result<SharedRecordStore> {
    Ok(open_records(config).await?.records)
}

async fn open_records(config: &ServerConfig) -> anyhow::Result<Opened> {
    let settings = OpenSettings {
        max_connections: config.db_max_connections,
    };
    Ok(crate::storage::open(&config.records(), &settings).await?)
}

/// Where idempotency records, rate limits and nonces live: Redis when configured (shared by
/// replicas); else the SQLite file for records and nonces, so a restart keeps them, with rate
/// limits in process; else (Postgres without Redis) all in process, forgotten on restart.
fn fast_state(
    config: &ServerConfig,
    durable: Option<SqliteFastState>,
) -> anyhow::Result<FastState> {
    if let Some(url) = config.redis_url.as_deref() {
        return Ok(FastState::redis(Arc::new(RedisFastState::new(
            url,
            Duration::from_secs(1),
        )?)));
    }
    let in_process = Arc::new(MemoryFastState::default());
    Ok(match durable {
        Some(durable) => {
            tracing::info!(
                "no REDIS_URL: idempotency records and nonces live in the SQLite file, rate limits in this process (one replica only)"
            );
            durable.purge_every(Duration::from_secs(config.embedded_purge_secs));
            FastState::embedded(Arc::new(durable), in_process)
        }
        None => {
            tracing::info!(
                "no REDIS_URL: idempotency records, rate limits and nonces live in this process (one replica only; a restart forgets them)"
            );
            FastState::memory(in_process)
        }
    })
}

/// Deletes expired committed idempotency outcomes in the background, a batch at a time so no
/// statement holds many rows.
fn purge_outcomes_every(store: Arc<dyn OutcomeStore>, every: Duration) {
    const BATCH: i64 = 1000;
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            loop {
                let now = chrono::Utc::now().timestamp_millis();
                match store.purge_outcomes(now, BATCH).await {
                    Ok(purged) if purged as i64 == BATCH => continue,
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not purge expired idempotency outcomes");
                        break;
                    }
                }
            }
        }
    });
}

/// Opens the records store, applies migrations and builds the service layer without fast
/// state (signed runner reports need it): what `cpctl` needs.
pub async fn open_services(config: &ServerConfig) -> anyhow::Result<Arc<Services>> {
    let kek = key_encryption_key(config)?;
    let store = open_store(config).await?;
    build_services(config, store, None, &kek).await
}

/// The key-encryption key: configured, or read from its owner-only file, which is created with
/// a new key on first start (and said once: replicas and `cpctl` need the same key).
pub fn key_encryption_key(config: &ServerConfig) -> anyhow::Result<KeyEncryptionKey> {
    if let Some(text) = config
        .key_encryption_key
        .as_deref()
        .filter(|k| !k.trim().is_empty())
    {
        return KeyEncryptionKey::from_base64(text).map_err(anyhow::Error::msg);
    }
    let path = config.key_file();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::storage::embedded_files::create_private_dir(dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
    }
    let (text, created) = crate::storage::embedded_files::read_or_create_key_file(&path, || {
        KeyEncryptionKey::generate().1
    })
    .map_err(anyhow::Error::msg)?;
    if created {
        tracing::warn!(
            path = %path.display(),
            "generated a key-encryption key: every replica and cpctl need the same one \
             (CP_KEY_ENCRYPTION_KEY or this file); keep it apart from the records store's backups"
        );
    }
    KeyEncryptionKey::from_base64(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

async fn build_services(
    config: &ServerConfig,
    store: SharedRecordStore,
    nonces: Option<NonceDeps>,
    kek: &KeyEncryptionKey,
) -> anyhow::Result<Arc<Services>> {
    let (hasher, source) = load_token_hasher(store.as_ref(), kek, config.token_hash_key.as_deref())
        .await
        .context("could not load the token hashing key")?;
    if source == KeySource::Generated {
        tracing::warn!(
            "no token hashing key configured: generated one and kept it in the records store; \
             set CP_TOKEN_HASH_KEY in production"
        );
    }
    let (webhook_signer, source) =
        load_webhook_signer(store.as_ref(), kek, config.webhook_signing_keys.as_deref())
            .await
            .context("could not load the webhook signing keys")?;
    if source == KeySource::Generated {
        tracing::warn!(
            "no webhook signing key configured: generated one and kept it in the records store; \
             set CP_WEBHOOK_SIGNING_KEYS in production"
        );
    }
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
            poll: Duration::from_millis(config.delivery_poll_ms),
        },
    };
    let deadline = Duration::from_millis(config.policy_deadline_ms);
    let engine = PolicyEngine::new(EngineSettings {
        deadline,
        memory_bytes: config.policy_memory_mib << 20,
        max_concurrent: config.policy_concurrency.max(1),
        queue_timeout: config
            .policy_queue_timeout_ms
            .map(Duration::from_millis)
            .unwrap_or_else(|| EngineSettings::default_queue_timeout(deadline)),
        shadow_queue: config.policy_shadow_queue as usize,
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

/// Keeps this process's policies in step with the store: reloads on every announcement, and
/// polls regardless (an announcement can be lost while the listener reconnects). A store that
/// does not announce other processes' changes (SQLite, or Postgres when LISTEN failed) is polled
/// four times a second to stay within a second of `cpctl`.
fn watch_policies(services: Arc<Services>) {
    tokio::spawn(async move {
        let mut changes = services.store().changes(Topic::Policies).await;
        let poll = if changes.announces_every_process() {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(250)
        };
        let mut generation = None;
        loop {
            tokio::select! {
                _ = changes.next() => {}
                () = tokio::time::sleep(poll) => {}
            }
            match services.store().policy_state().await {
                Ok(state) if Some(state.generation) == generation => continue,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the policy state");
                    continue;
                }
            }
            match services.reload_policies().await {
                Ok(g) => {
                    if generation.is_some() {
                        tracing::info!(generation = g, "policies reloaded");
                    }
                    generation = Some(g);
                }
                Err(e) => {
                    tracing::error!(error = %e, "could not reload policies; keeping the previous ones")
                }
            }
        }
    });
}

/// Fails overdue runner commands every `every`; the rule (which are overdue, what they become,
/// once across replicas) is the service's. A full batch that failed something is followed by
/// the next at once; one that failed nothing (others got there first) waits for the tick.
fn sweep_timeouts(services: Arc<Services>, every: Duration) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            loop {
                match services.time_out_overdue_commands().await {
                    Ok(sweep) if sweep.more && sweep.failed > 0 => continue,
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "the command timeout sweep failed; retrying at the next tick");
                        break;
                    }
                }
            }
        }
    });
}

/// A build without the `bench-allow-all` feature has no allow-all authorizer. A deployment that
/// still sets `CP_AUTHORIZER` is refused at start-up rather than ignored, so nobody believes
/// authorization is off (or on) by mistake; `--authorizer` is an unknown flag to clap.
fn refuse_allow_all() -> anyhow::Result<()> {
    if cfg!(not(feature = "bench-allow-all")) && std::env::var_os("CP_AUTHORIZER").is_some() {
        anyhow::bail!(
            "CP_AUTHORIZER is not supported by this build: every request is authorized by the \
             active policy (the allow-all authorizer exists only in benchmark builds, \
             --features bench-allow-all); unset it"
        );
    }
    Ok(())
}

impl Application {
    pub async fn build(config: &ServerConfig) -> anyhow::Result<Self> {
        refuse_allow_all()?;
        let lock = match config.records() {
            RecordsLocation::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    crate::storage::embedded_files::create_private_dir(dir)
                        .with_context(|| format!("could not create {}", dir.display()))?;
                }
                Some(lock_embedded_store(&path)?)
            }
            RecordsLocation::Postgres(_) => None,
        };
        let kek = key_encryption_key(config)?;
        let opened = open_records(config).await?;
        let store = opened.records;
        let fast = fast_state(config, opened.durable_fast_state)?;
        let nonces = NonceDeps {
            store: fast.nonces.clone(),
            key_prefix: config.redis_prefix.clone(),
        };
        let services = build_services(config, store, Some(nonces), &kek).await?;
        let bootstrapped = first_start(config, &services).await?;
        let (cipher, source) = load_record_cipher(
            services.store().as_ref(),
            &kek,
            config.idempotency_keys.as_deref(),
        )
        .await
        .context("could not load the idempotency encryption key")?;
        if source == KeySource::Generated {
            tracing::warn!(
                "no idempotency encryption key configured: generated one and kept it in the records store; \
                 set CP_IDEMPOTENCY_KEYS in production"
            );
        }
        let http = HttpSettings {
            body_limit: config.body_limit,
            rates: RateSettings {
                default: config.rate_limit.0,
                user: config.user_rate_limit.0,
                organisation: config.org_rate_limit.0,
                issue: config.issue_rate_limit.0,
                runner_address: config.runner_address_rate_limit.0,
                runner: config.runner_rate_limit.0,
                fail_closed: config.rate_limit_fail_closed,
            },
            idempotency_quota: (config.idempotency_quota_bytes > 0)
                .then_some(config.idempotency_quota_bytes),
            idempotency_lease: Duration::from_millis(config.idempotency_lease_ms.max(300)),
            key_prefix: config.redis_prefix.clone(),
            heartbeat: Duration::from_millis(config.sse_heartbeat_ms.max(10)),
            ops_rate: config.ops_rate_limit.0,
            separate_ops: config.ops_listen.is_some(),
        };
        watch_policies(services.clone());
        purge_outcomes_every(
            services.store().clone(),
            Duration::from_secs(config.outcome_purge_secs),
        );
        sweep_timeouts(
            services.clone(),
            Duration::from_secs(config.command_timeout_sweep_secs),
        );
        services.audit_feed().follow();
        Dispatcher::new(services.clone())?.spawn();
        let endpoints = build_app(services.clone(), &http, fast, cipher)?;
        let acceptor = bind(&config.listen).await?;
        if let Some(done) = bootstrapped {
            let url = base_url(&config.listen, Some(port_of(&acceptor)));
            let cpctl = cpctl_invocation(&config.records());
            // Printed, never logged: a secret must not reach a log line.
            println!(
                "--dev: organisation {} workspace {} admin {}\ntoken (shown once): {}\n\n{}",
                done.organisation.id,
                done.workspace.id,
                done.user.id,
                done.credential.secret.expose(),
                first_steps(&url, &cpctl, &done)
            );
        }
        let ops = match (&config.ops_listen, endpoints.ops) {
            (Some(address), Some(endpoint)) => Some((bind(address).await?, endpoint)),
            _ => None,
        };
        Ok(Self {
            acceptor,
            limits: connection_limits(config),
            idle_timeout: Duration::from_secs(config.idle_timeout_secs),
            endpoint: endpoints.api,
            ops,
            services,
            _lock: lock,
        })
    }

    pub fn port(&self) -> u16 {
        port_of(&self.acceptor)
    }

    /// The operator listener's port, with `--ops-listen`.
    pub fn ops_port(&self) -> Option<u16> {
        self.ops.as_ref().map(|(acceptor, _)| port_of(acceptor))
    }

    pub fn services(&self) -> Arc<Services> {
        self.services.clone()
    }

    /// Serves until SIGINT/SIGTERM, then drains in-flight requests for up to 10 seconds.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        tracing::info!(port = self.port(), ops_port = self.ops_port(), "listening");
        let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
        let stopped = |stop: &tokio::sync::broadcast::Sender<()>| {
            let mut rx = stop.subscribe();
            async move {
                let _ = rx.recv().await;
            }
        };
        let api = Server::new_with_acceptor(LimitedAcceptor::new(self.acceptor, self.limits))
            .idle_timeout(self.idle_timeout)
            .run_with_graceful_shutdown(
                self.endpoint,
                stopped(&stop),
                Some(Duration::from_secs(10)),
            );
        let ops = serve_ops(self.ops, stopped(&stop));
        let signal = async {
            shutdown_signal().await;
            let _ = stop.send(());
        };
        let (api, ops, ()) = tokio::join!(api, ops, signal);
        api.and(ops)
    }

    /// Serves until the returned future is dropped; for tests.
    pub async fn run(self) -> std::io::Result<()> {
        let api = Server::new_with_acceptor(LimitedAcceptor::new(self.acceptor, self.limits))
            .idle_timeout(self.idle_timeout)
            .run(self.endpoint);
        let ops = serve_ops(self.ops, std::future::pending());
        let (api, ops) = tokio::join!(api, ops);
        api.and(ops)
    }
}

/// The configured connection bounds; the process cap defaults to the open-file limit less 256.
fn connection_limits(config: &ServerConfig) -> ConnectionLimits {
    let total = config
        .max_connections
        .map(|n| n as usize)
        .unwrap_or_else(|| open_file_limit().saturating_sub(256).max(64));
    ConnectionLimits {
        total,
        per_address: config.max_connections_per_address.0,
        header_deadline: Duration::from_millis(config.header_timeout_ms),
    }
}

/// The soft open-file limit, from `/proc/self/limits` (1,024, the usual default, where that
/// cannot be read).
fn open_file_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            limits
                .lines()
                .find(|l| l.starts_with("Max open files"))?
                .split_whitespace()
                .nth(3)?
                .parse()
                .ok()
        })
        .unwrap_or(1024)
}

async fn bind(address: &str) -> anyhow::Result<TcpAcceptor> {
    TcpListener::bind(address.to_owned())
        .into_acceptor()
        .await
        .with_context(|| format!("could not listen on {address}"))
}

fn port_of(acceptor: &TcpAcceptor) -> u16 {
    acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().map(|s| s.port()))
        .unwrap_or_default()
}

async fn serve_ops(
    ops: Option<(TcpAcceptor, poem::endpoint::BoxEndpoint<'static>)>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match ops {
        Some((acceptor, endpoint)) => {
            Server::new_with_acceptor(acceptor)
                .run_with_graceful_shutdown(endpoint, stop, Some(Duration::from_secs(1)))
                .await
        }
        None => Ok(()),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::base_url;

    #[test]
    fn the_printed_url_is_one_a_client_can_reach() {
        assert_eq!(base_url("0.0.0.0:8080", None), "http://localhost:8080");
        assert_eq!(base_url("[::]:8080", Some(41000)), "http://localhost:41000");
        assert_eq!(
            base_url("127.0.0.1:0", Some(41000)),
            "http://127.0.0.1:41000"
        );
        assert_eq!(base_url("[::1]:8080", None), "http://[::1]:8080");
        assert_eq!(base_url("api.internal:80", None), "http://api.internal:80");
    }
}
