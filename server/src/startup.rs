//! Builds the application from configuration and runs it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use poem::listener::{Acceptor, Listener, TcpAcceptor, TcpListener};
use poem::{EndpointExt, Server};

use crate::config::{RecordsLocation, ServerConfig};
use crate::http::{HttpSettings, RateSettings, build_app};
use crate::policy::{
    Disagreement, EngineSettings, PolicyEngine, PolicyKind, PolicyRuntime, defaults,
};
use crate::service::{
    AllowAllAuthorizer, Authorizer, KeySource, ServiceSettings, Services, load_record_cipher,
    load_token_hasher,
};
use crate::storage::postgres::PostgresSettings;
use crate::storage::{
    DisagreementRecord, FastState, MemoryFastState, POLICY_CHANNEL, PostgresStore, RedisFastState,
    SharedRecordStore, SqliteStore,
};

pub struct Application {
    acceptor: TcpAcceptor,
    endpoint: poem::endpoint::BoxEndpoint<'static>,
    services: Arc<Services>,
    /// Held while serving: the embedded store's one-process lock.
    _lock: Option<std::fs::File>,
}

/// The embedded store keeps limits, idempotency records and nonces in this process, so a second
/// server on the same file would split them: refuse it.
fn lock_embedded_store(path: &std::path::Path) -> anyhow::Result<std::fs::File> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".server-lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
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
             process (rate limits and idempotency live in it). To run several replicas, use \
             Postgres and Redis (set DATABASE_URL and REDIS_URL; see the README)",
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("could not lock {}", path.display()))
        }
    }
}

/// On an empty store: bootstrap a development tenant (`--dev`) and print its token once, or
/// log the command that bootstraps one.
async fn first_start(config: &ServerConfig, services: &Services) -> anyhow::Result<()> {
    if !services.list_organisations().await?.is_empty() {
        return Ok(());
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
        // Printed, never logged: a secret must not reach a log line.
        println!(
            "--dev: organisation {} workspace {} admin {}\ntoken (shown once): {}",
            done.organisation.id,
            done.workspace.id,
            done.user.id,
            done.credential.secret.expose()
        );
        return Ok(());
    }
    let store_arg = match config.records() {
        RecordsLocation::Postgres(_) => "DATABASE_URL=... ".to_owned(),
        RecordsLocation::Sqlite(path) => format!("--database-url sqlite://{} ", path.display()),
    };
    tracing::warn!(
        command = %format!(
            "cpctl {store_arg}bootstrap --org ORG --workspace WORKSPACE --admin EMAIL"
        ),
        "the records store is empty: create the first organisation, workspace and admin token with this command (or restart with --dev)"
    );
    Ok(())
}

/// An open records store, and what the server must do for its kind.
pub struct OpenedStore {
    pub store: SharedRecordStore,
    /// The SQLite adapter, when that is the store: it announces audit events in process.
    sqlite: Option<Arc<SqliteStore>>,
}

/// Opens the records store the configuration names and applies its migrations.
pub async fn open_store(config: &ServerConfig) -> anyhow::Result<OpenedStore> {
    match config.records() {
        RecordsLocation::Postgres(url) => {
            let settings = PostgresSettings {
                max_connections: config.db_max_connections,
                ..PostgresSettings::default()
            };
            if PostgresStore::ensure_database(&url)
                .await
                .context("could not reach Postgres (is it running and DATABASE_URL right?)")?
            {
                tracing::info!("created the records database");
            }
            let store = PostgresStore::connect_lazy(&url, &settings)?;
            store
                .migrate()
                .await
                .context("could not apply migrations to the records store (is Postgres running and DATABASE_URL right?)")?;
            Ok(OpenedStore {
                store: Arc::new(store),
                sqlite: None,
            })
        }
        RecordsLocation::Sqlite(path) => {
            let store = SqliteStore::open(&path, config.db_max_connections)
                .await
                .with_context(|| {
                    format!("could not open the SQLite records store {}", path.display())
                })?;
            store
                .migrate()
                .await
                .with_context(|| format!("could not apply migrations to {}", path.display()))?;
            let store = Arc::new(store);
            Ok(OpenedStore {
                store: store.clone(),
                sqlite: Some(store),
            })
        }
    }
}

/// Opens the records store, applies migrations and builds the service layer: shared by the
/// server and `cpctl`.
pub async fn open_services(config: &ServerConfig) -> anyhow::Result<Arc<Services>> {
    let opened = open_store(config).await?;
    let services = build_services(config, opened.store.clone()).await?;
    if let Some(sqlite) = &opened.sqlite {
        // No NOTIFY in SQLite: this process's own writes reach its stream subscribers at once;
        // other processes' (cpctl) within the feed's poll.
        let feed = services.audit_feed().clone();
        sqlite.on_audit_event(move |workspace| {
            let feed = feed.clone();
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move { feed.refresh(workspace).await });
            }
        });
    }
    Ok(services)
}

async fn build_services(
    config: &ServerConfig,
    store: SharedRecordStore,
) -> anyhow::Result<Arc<Services>> {
    let (hasher, source) = load_token_hasher(store.as_ref(), config.token_hash_key.as_deref())
        .await
        .context("could not load the token hashing key")?;
    if source == KeySource::Generated {
        tracing::warn!(
            "no token hashing key configured: generated one and kept it in the records store; \
             set CP_TOKEN_HASH_KEY in production"
        );
    }
    let settings = ServiceSettings {
        max_active_tokens_per_user: config.max_active_tokens_per_user,
        moderation_blocklist: config
            .moderation_blocklist
            .iter()
            .map(|w| w.trim().to_lowercase())
            .filter(|w| !w.is_empty())
            .collect(),
    };
    let engine = PolicyEngine::new(EngineSettings {
        deadline: Duration::from_millis(config.policy_deadline_ms),
        memory_bytes: config.policy_memory_mib << 20,
        max_concurrent: config.policy_concurrency.max(1),
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
    let authorizer: Arc<dyn Authorizer> = if config.authorizer == "allow-all" {
        tracing::warn!("authorizer is allow-all: every request is authorized; for benchmarks only");
        Arc::new(AllowAllAuthorizer)
    } else {
        runtime.clone()
    };
    let services = Arc::new(Services::new(
        store,
        hasher,
        authorizer,
        Some(runtime),
        settings,
    ));
    services
        .reload_policies()
        .await
        .context("could not load the active policies")?;
    Ok(services)
}

/// Keeps this process's policies in step with the store: reloads on every notification, and
/// polls regardless (a notification can be missed while the listener reconnects; SQLite has
/// none, so it is polled four times a second to stay within a second of `cpctl`).
fn watch_policies(services: Arc<Services>, pool: Option<sqlx::PgPool>) {
    tokio::spawn(async move {
        let mut listener = match pool {
            Some(pool) => match sqlx::postgres::PgListener::connect_with(&pool).await {
                Ok(mut l) => match l.listen(POLICY_CHANNEL).await {
                    Ok(()) => Some(l),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot listen for policy changes; polling only");
                        None
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for policy changes; polling only");
                    None
                }
            },
            None => None,
        };
        let poll = if listener.is_some() {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(250)
        };
        let mut generation = None;
        loop {
            let notified = async {
                match listener.as_mut() {
                    Some(l) => l.recv().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = notified => {}
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

impl Application {
    pub async fn build(config: &ServerConfig) -> anyhow::Result<Self> {
        let lock = match config.records() {
            RecordsLocation::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("could not create {}", dir.display()))?;
                }
                Some(lock_embedded_store(&path)?)
            }
            RecordsLocation::Postgres(_) => None,
        };
        let services = open_services(config).await?;
        first_start(config, &services).await?;
        let (cipher, source) = load_record_cipher(
            services.store().as_ref(),
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
        let fast = match config.redis_url.as_deref() {
            Some(url) => {
                FastState::redis(Arc::new(RedisFastState::new(url, Duration::from_secs(1))?))
            }
            None => {
                tracing::info!(
                    "no REDIS_URL: idempotency records and rate limits live in this process (one replica only)"
                );
                FastState::memory(Arc::new(MemoryFastState::default()))
            }
        };
        let http = HttpSettings {
            body_limit: config.body_limit,
            rates: RateSettings {
                default: config.rate_limit.0,
                issue: config.issue_rate_limit.0,
                fail_closed: config.rate_limit_fail_closed,
            },
            key_prefix: config.redis_prefix.clone(),
            heartbeat: Duration::from_millis(config.sse_heartbeat_ms.max(10)),
        };
        services.set_nonce_store(fast.nonces.clone(), config.redis_prefix.clone());
        let pool = services.store().postgres_pool();
        watch_policies(services.clone(), pool.clone());
        services.audit_feed().follow(pool);
        let endpoint = build_app(services.clone(), &http, fast, cipher)?.boxed();
        let acceptor = TcpListener::bind(config.listen.clone())
            .into_acceptor()
            .await
            .with_context(|| format!("could not listen on {}", config.listen))?;
        Ok(Self {
            acceptor,
            endpoint,
            services,
            _lock: lock,
        })
    }

    pub fn port(&self) -> u16 {
        self.acceptor
            .local_addr()
            .first()
            .and_then(|a| a.as_socket_addr().map(|s| s.port()))
            .unwrap_or_default()
    }

    pub fn services(&self) -> Arc<Services> {
        self.services.clone()
    }

    /// Serves until SIGINT/SIGTERM, then drains in-flight requests for up to 10 seconds.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        tracing::info!(port = self.port(), "listening");
        Server::new_with_acceptor(self.acceptor)
            .run_with_graceful_shutdown(
                self.endpoint,
                shutdown_signal(),
                Some(Duration::from_secs(10)),
            )
            .await
    }

    /// Serves until the returned future is dropped; for tests.
    pub async fn run(self) -> std::io::Result<()> {
        Server::new_with_acceptor(self.acceptor)
            .run(self.endpoint)
            .await
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
