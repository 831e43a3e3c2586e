//! Tracing set-up. Log lines carry the request span (correlation id, method, path) and never
//! a secret: tokens are only ever logged by their non-secret prefix.

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, fmt};

use crate::config::LogFormat;

/// Installs the global subscriber, writing to `writer`. `RUST_LOG` overrides the default filter.
pub fn init<W>(format: LogFormat, default_filter: &str, writer: W)
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(writer),
            )
            .try_init(),
        LogFormat::Pretty => registry.with(fmt::layer().with_writer(writer)).try_init(),
    };
    // A second initialisation (several apps in one test process) keeps the first subscriber.
    let _ = result;
}
