//! Tracing set-up. Log lines carry the request span (correlation id, method, path) and never
//! a secret: tokens are only ever logged by their non-secret prefix.

use tracing::Subscriber;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, fmt};

use crate::config::LogFormat;

/// Installs the global subscriber, writing to `writer`. `RUST_LOG` overrides the default filter.
pub fn init<W>(format: LogFormat, default_filter: &str, writer: W)
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let spec = std::env::var("RUST_LOG").ok();
    let registry = tracing_subscriber::registry().with(filter(spec.as_deref(), default_filter));
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

type BoxedFilter<S> = Box<dyn Layer<S> + Send + Sync>;

/// The filter `spec` (else `default`) describes. A list of `target=level` directives, the usual
/// case, becomes a static [`Targets`] filter. `EnvFilter` is kept for directives that name a
/// span or a field (`[request{path=..}]=debug`): it takes a shared lock each time any span is
/// entered or left, and sqlx enters the request span at every row it yields, which cost about
/// 2% of the server's CPU on `GET activity` (BENCHMARKS.md). A spec that does not parse, or an
/// empty one, gives `default`, as before.
fn filter<S>(spec: Option<&str>, default: &str) -> BoxedFilter<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    spec.and_then(parse)
        .or_else(|| parse(default))
        .unwrap_or_else(|| Box::new(EnvFilter::new(default)))
}

/// One spec as a filter, `None` when it is empty or does not parse.
fn parse<S>(spec: &str) -> Option<BoxedFilter<S>>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let spec = spec.trim();
    if spec.is_empty() {
        None
    } else if names_spans_or_fields(spec) {
        EnvFilter::try_new(spec)
            .ok()
            .map(|f| Box::new(f) as BoxedFilter<S>)
    } else {
        spec.parse::<Targets>()
            .ok()
            .map(|t| Box::new(t) as BoxedFilter<S>)
    }
}

/// Whether a filter spec has a span or field directive, which only `EnvFilter` understands.
fn names_spans_or_fields(spec: &str) -> bool {
    spec.contains(['[', '{'])
}

#[cfg(test)]
mod tests {
    use tracing::Level;
    use tracing::level_filters::LevelFilter;
    use tracing_subscriber::Registry;

    use super::*;

    fn hint(spec: Option<&str>) -> Option<LevelFilter> {
        filter::<Registry>(spec, "info,sqlx=warn").max_level_hint()
    }

    #[test]
    fn target_lists_get_the_static_filter_and_span_directives_keep_env_filter() {
        assert!(!names_spans_or_fields("info,sqlx=warn"));
        assert!(!names_spans_or_fields("debug,hyper=info,h2=info"));
        assert!(names_spans_or_fields("info,[request]=debug"));
        assert!(names_spans_or_fields("[{correlation_id=abc}]=trace"));
    }

    #[test]
    fn the_spec_decides_the_levels_and_a_bad_or_empty_one_gives_the_default() {
        assert_eq!(hint(None), Some(LevelFilter::INFO));
        assert_eq!(hint(Some("  ")), Some(LevelFilter::INFO));
        assert_eq!(hint(Some("warn")), Some(LevelFilter::WARN));
        assert_eq!(
            hint(Some("info,control_plane=trace")),
            Some(LevelFilter::TRACE)
        );
        assert_eq!(hint(Some("not a=level=spec")), Some(LevelFilter::INFO));
        // A span directive is understood (by EnvFilter): it can enable trace inside the span.
        assert_eq!(
            hint(Some("warn,[request]=trace")),
            Some(LevelFilter::from_level(Level::TRACE))
        );
    }
}
