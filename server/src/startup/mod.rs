//! Builds the application from configuration and runs it. [`Application::build`] reads in
//! order: the records store and fast state (`stores`), the service layer (`services`), a first
//! start's bootstrap (`first_start`), the background tasks (`background`), then the HTTP app
//! and its listeners (`listeners`).

mod background;
pub mod cpctl_contexts;
mod first_start;
mod listeners;
mod services;
mod stores;

pub use first_start::{base_url, cpctl_invocation, first_steps};
pub use services::open_services;
pub use stores::{key_encryption_key, lock_embedded_store, open_store};

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use poem::Server;
use poem::listener::TcpAcceptor;

use self::background::{
    notice_expiring_tokens, purge_expired_audit, purge_outcomes_every, sign_audit_heads,
    sweep_timeouts, watch_policies,
};
use self::first_start::{first_start, keep_dev_context};
use self::listeners::{bind, connection_limits, port_of, serve_ops, shutdown_signal};
use self::services::{build_services, refuse_allow_all};
use self::stores::{fast_state, open_records};
use crate::config::{RecordsLocation, ServerConfig};
use crate::http::connections::{ConnectionLimits, LimitedAcceptor};
use crate::http::{HttpSettings, RateSettings, build_app};
use crate::service::{Dispatcher, NonceDeps, RECORD_KEYS, Services, load_keys};

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
        let opened = open_records(config, true).await?;
        let store = opened.records;
        let fast = fast_state(config, opened.durable_fast_state)?;
        let nonces = NonceDeps {
            store: fast.nonces.clone(),
            key_prefix: config.redis_prefix.clone(),
        };
        let services = build_services(config, store, opened.replica, Some(nonces), &kek).await?;
        let bootstrapped = first_start(config, &services).await?;
        let (cipher, source) = load_keys(
            services.store().as_ref(),
            &kek,
            config.idempotency_keys.as_deref(),
            &RECORD_KEYS,
        )
        .await
        .context("could not load the idempotency encryption key")?;
        source.warn_if_generated("idempotency encryption key", "CP_IDEMPOTENCY_KEYS");
        if config.trusted_proxies.trusts_any_address() {
            tracing::warn!(
                blocks = %config.trusted_proxies,
                "--trusted-proxies holds every address: any client that reaches this server \
                 directly chooses the address its rate limits are charged to"
            );
        }
        let http = HttpSettings {
            body_limit: config.body_limit,
            policy_upload_limit: config.policy_upload_max_mib.saturating_mul(1 << 20),
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
            console: config
                .console
                .then(|| crate::http::console::ConsoleSettings {
                    // Browsers drop a Secure cookie sent over plain http except to loopback; `--dev`
                    // on loopback is the one place the console runs without TLS in front of it.
                    secure_cookie: !(config.dev && listens_on_loopback(&config.listen)),
                }),
            trusted_proxies: config.trusted_proxies.clone(),
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
        purge_expired_audit(services.clone());
        sign_audit_heads(services.clone());
        notice_expiring_tokens(
            services.clone(),
            config.token_expiry_notice,
            Duration::from_secs(config.token_expiry_notice_secs),
        );
        services.audit_feed().follow();
        Dispatcher::new(services.clone())?.spawn();
        let endpoints = build_app(services.clone(), &http, fast, cipher)?;
        let acceptor = bind(&config.listen).await?;
        if let Some(done) = bootstrapped {
            let url = base_url(&config.listen, Some(port_of(&acceptor)));
            let context = if config.dev_context {
                keep_dev_context(&url, &done)
            } else {
                None
            };
            // Printed, never logged: a secret must not reach a log line.
            println!(
                "--dev: organisation {} workspace {} admin {}\ntoken (shown once): {}\n\n{}",
                done.organisation.id,
                done.workspace.id,
                done.user.id,
                done.credential.secret.expose(),
                first_steps(&url, &done, context)
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

/// Whether `listen` is a loopback address (`127.0.0.1:8080`, `[::1]:8080`, `localhost:8080`).
fn listens_on_loopback(listen: &str) -> bool {
    let host = listen.rsplit_once(':').map_or(listen, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
