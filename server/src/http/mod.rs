//! The HTTP adapter: routes, middleware and the OpenAPI document.

mod admission;
mod api;
mod auth;
pub mod connections;
pub mod console;
mod context;
mod docs;
pub mod error;
mod fields;
mod forwarded;
mod idempotency;
mod limits;
mod metrics;
mod ops;
mod payload;
#[cfg(test)]
mod snapshot;

use std::sync::Arc;

use poem::endpoint::BoxEndpoint;
use poem::{EndpointExt, IntoEndpoint, Route};
use poem_openapi::{OpenApi, OpenApiService};

pub use context::CORRELATION_HEADER;
pub use forwarded::TrustedProxies;
pub use limits::RateSettings;

use crate::domain::RecordCipher;
use crate::service::{LastUseRecorder, Services};
use crate::storage::{FastState, MemoryFastState, Rate, RateLimiter};
use admission::Admission;
use context::RequestContext;
use idempotency::{Idempotency, IdempotencyGuard};
use limits::RateGuard;
use metrics::HttpMetrics;

/// Settings of the HTTP surface.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Largest accepted request body, in bytes (413 past it).
    pub body_limit: usize,
    /// Largest policy component an install accepts, in bytes: that route's own body limit.
    pub policy_upload_limit: usize,
    pub rates: RateSettings,
    /// Bytes of stored idempotent responses per owner per 24 hours; `None`: no quota.
    pub idempotency_quota: Option<u64>,
    /// How long a keyed request's claim holds its key; its handler is stopped at two thirds.
    pub idempotency_lease: std::time::Duration,
    /// Prefix of every fast-state key, so several deployments (or tests) can share one Redis.
    pub key_prefix: String,
    /// Idle interval between audit stream heartbeat comments.
    pub heartbeat: std::time::Duration,
    /// Requests per client address to the routes outside `/v1` (in this process).
    pub ops_rate: Option<Rate>,
    /// Serve `/healthz`, `/readyz` and `/metrics` on their own listener, not the API's.
    pub separate_ops: bool,
    /// Proxies whose `X-Forwarded-For` names the client.
    pub trusted_proxies: TrustedProxies,
    /// The web console at `/console`; `None`: not served.
    pub console: Option<console::ConsoleSettings>,
}

pub const API_VERSION: &str = "0.5.0";

fn openapi_service() -> OpenApiService<impl OpenApi, ()> {
    OpenApiService::new(api::all(), "Control plane", API_VERSION).description(docs::DESCRIPTION)
}

/// The OpenAPI document served at `/openapi.json`.
pub fn openapi_document() -> String {
    docs::finish(&openapi_service().spec())
}

/// What [`build_app`] serves: the API (with the documents, and the operator's routes unless
/// they have a listener of their own) and, when asked, the operator's routes alone.
pub struct AppEndpoints {
    pub api: BoxEndpoint<'static>,
    pub ops: Option<BoxEndpoint<'static>>,
}

/// Builds the whole application: every route behind the request-context middleware.
pub fn build_app(
    services: Arc<Services>,
    settings: &HttpSettings,
    fast: FastState,
    cipher: RecordCipher,
) -> Result<AppEndpoints, prometheus::Error> {
    let service = openapi_service();
    let raw_spec = service.spec();
    let spec = docs::finish(&raw_spec);
    // The UI embeds the document; serve it the finished one.
    let docs_html = service.swagger_ui_html().replace(&raw_spec, &spec);
    let metrics = Arc::new(HttpMetrics::new()?);
    metrics.register(services.background_passes().collector())?;
    if let Some(runtime) = services.policy_runtime() {
        for collector in runtime.metrics() {
            metrics.register(collector)?;
        }
    }
    if let Some(replica) = services.read_replica() {
        for collector in replica.health().collectors() {
            metrics.register(collector)?;
        }
    }
    let plain: Vec<&str> = ops::OPERATOR_PATHS
        .iter()
        .chain(&ops::DOCUMENT_PATHS)
        .copied()
        .collect();
    let allowed = Arc::new(ops::AllowedMethods::of(&plain));
    let guard = Arc::new(IdempotencyGuard::new(
        fast.idempotency,
        services.store().clone(),
        cipher.clone(),
        settings.key_prefix.clone(),
        settings.idempotency_quota,
        settings.idempotency_lease,
    ));
    let rates = Arc::new(RateGuard {
        limiter: fast.limiter,
        settings: settings.rates.clone(),
        prefix: settings.key_prefix.clone(),
        metrics: metrics.clone(),
    });

    // The routes outside /v1 share one in-process limiter (see `ops`).
    let ops_limiter: Arc<dyn RateLimiter> = Arc::new(MemoryFastState::default());
    let readiness = Arc::new(ops::Readiness::new(services.clone(), metrics.clone()));
    let operator = Arc::new(ops::operator_routes(
        readiness,
        metrics.clone(),
        ops_limiter.clone(),
        settings.ops_rate,
    ));
    let jwks = services.webhook_signer().jwks().to_string();
    let documents = Arc::new(ops::document_routes(
        spec,
        docs_html,
        jwks,
        metrics.clone(),
        ops_limiter,
        settings.ops_rate,
    ));
    let trusted_proxies = Arc::new(settings.trusted_proxies.clone());
    let mut routes = Route::new();
    let mut ops_endpoint = None;
    if settings.separate_ops {
        let only = Route::new().nest("/", operator);
        ops_endpoint = Some(
            RequestContext::new(
                only.with(poem::middleware::CatchPanic::new()),
                metrics.clone(),
                rates.clone(),
                settings.body_limit,
                trusted_proxies.clone(),
            )
            .with_allowed(allowed.clone())
            .boxed(),
        );
    } else {
        for path in ops::OPERATOR_PATHS {
            routes = routes.at(path, operator.clone());
        }
    }
    for path in ops::DOCUMENT_PATHS {
        routes = routes.at(path, documents.clone());
    }
    let last_use = LastUseRecorder::start(
        services.store().clone(),
        fast.use_claims,
        settings.key_prefix.clone(),
    )?;
    for collector in last_use.collectors() {
        metrics.register(collector)?;
    }
    let admission = Arc::new(Admission {
        services: services.clone(),
        rates: rates.clone(),
        last_use: Some(last_use),
    });
    let routes = routes
        .nest("/", Idempotency::new(service.into_endpoint(), guard))
        .data(services)
        .data(rates.clone())
        .data(admission)
        .data(api::Heartbeat(settings.heartbeat))
        // A panic becomes a bare 500 here, which the request context renders as an ApiError.
        .with(poem::middleware::CatchPanic::new());
    let api = RequestContext::new(
        routes,
        metrics.clone(),
        rates.clone(),
        settings.body_limit,
        trusted_proxies.clone(),
    )
    .with_allowed(allowed)
    .with_upload_limit(settings.policy_upload_limit)
    .boxed();
    let Some(console_settings) = &settings.console else {
        return Ok(AppEndpoints {
            api,
            ops: ops_endpoint,
        });
    };
    // The console is a client of the API endpoint above, in this process; its own requests
    // have a request context of their own (correlation id, access log, metrics).
    let api = Arc::new(api);
    let console = console::Console::new(
        api.clone(),
        console_settings,
        cipher,
        fast.sign_outs,
        settings.key_prefix.clone(),
    );
    let console = RequestContext::new(
        console,
        metrics,
        rates,
        settings.body_limit,
        trusted_proxies,
    );
    let app = Route::new()
        .nest_no_strip("/console", console)
        .nest("/", api)
        .boxed();
    Ok(AppEndpoints {
        api: app,
        ops: ops_endpoint,
    })
}
