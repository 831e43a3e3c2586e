//! The listeners: binding them, the API listener's connection bounds (from the open-file
//! limit), serving the operator's routes on their own listener, and the signals that stop
//! both.

use std::time::Duration;

use anyhow::Context;
use poem::Server;
use poem::listener::{Acceptor, Listener, TcpAcceptor, TcpListener};

use crate::config::ServerConfig;
use crate::http::connections::ConnectionLimits;

/// The configured connection bounds; the process cap defaults to the open-file limit less 256.
pub(super) fn connection_limits(config: &ServerConfig) -> ConnectionLimits {
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

pub(super) async fn bind(address: &str) -> anyhow::Result<TcpAcceptor> {
    TcpListener::bind(address.to_owned())
        .into_acceptor()
        .await
        .with_context(|| format!("could not listen on {address}"))
}

pub(super) fn port_of(acceptor: &TcpAcceptor) -> u16 {
    acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().map(|s| s.port()))
        .unwrap_or_default()
}

pub(super) async fn serve_ops(
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

pub(super) async fn shutdown_signal() {
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
