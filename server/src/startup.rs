//! Builds the application from configuration and runs it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use poem::listener::{Acceptor, Listener, TcpAcceptor, TcpListener};
use poem::{EndpointExt, Server};

use crate::config::ServerConfig;
use crate::http::{HttpSettings, RateSettings, build_app};
use crate::service::{
    KeySource, ScopeAuthorizer, ServiceSettings, Services, load_record_cipher, load_token_hasher,
};
use crate::storage::postgres::PostgresSettings;
use crate::storage::{FastState, MemoryFastState, PostgresStore, RedisFastState};

pub struct Application {
    acceptor: TcpAcceptor,
    endpoint: poem::endpoint::BoxEndpoint<'static>,
    services: Arc<Services>,
}

/// Opens the records store, applies migrations and builds the service layer: shared by the
/// server and `cpctl`.
pub async fn open_services(config: &ServerConfig) -> anyhow::Result<Arc<Services>> {
    let url = config
        .database_url
        .as_deref()
        .context("DATABASE_URL (or --database-url) is required: the records store is Postgres")?;
    let settings = PostgresSettings {
        max_connections: config.db_max_connections,
        ..PostgresSettings::default()
    };
    if PostgresStore::ensure_database(url)
        .await
        .context("could not reach Postgres (is it running and DATABASE_URL right?)")?
    {
        tracing::info!("created the records database");
    }
    let store = PostgresStore::connect_lazy(url, &settings)?;
    store
        .migrate()
        .await
        .context("could not apply migrations to the records store (is Postgres running and DATABASE_URL right?)")?;
    let (hasher, source) = load_token_hasher(&store, config.token_hash_key.as_deref())
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
    };
    Ok(Arc::new(Services::new(
        Arc::new(store),
        hasher,
        Arc::new(ScopeAuthorizer),
        settings,
    )))
}

impl Application {
    pub async fn build(config: &ServerConfig) -> anyhow::Result<Self> {
        let services = open_services(config).await?;
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
        };
        let endpoint = build_app(services.clone(), &http, fast, cipher)?.boxed();
        let acceptor = TcpListener::bind(config.listen.clone())
            .into_acceptor()
            .await
            .with_context(|| format!("could not listen on {}", config.listen))?;
        Ok(Self {
            acceptor,
            endpoint,
            services,
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
