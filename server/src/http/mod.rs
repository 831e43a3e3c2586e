//! The HTTP adapter: routes, middleware and the OpenAPI document.

mod api;
mod auth;
mod context;
mod docs;
pub mod error;
mod fields;
mod idempotency;
mod limits;
mod metrics;
mod payload;
#[cfg(test)]
mod snapshot;

use std::sync::Arc;

use poem::endpoint::make_sync;
use poem::http::StatusCode;
use poem::web::{Html, Json};
use poem::{Endpoint, EndpointExt, IntoEndpoint, IntoResponse, Route, get};
use poem_openapi::{OpenApi, OpenApiService};

pub use context::CORRELATION_HEADER;
pub use limits::RateSettings;

use crate::domain::RecordCipher;
use crate::service::Services;
use crate::storage::FastState;
use context::RequestContext;
use error::ApiFailure;
use idempotency::{Idempotency, IdempotencyGuard, Operations};
use limits::RateGuard;
use metrics::HttpMetrics;

/// Settings of the HTTP surface.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Largest accepted request body, in bytes (413 past it).
    pub body_limit: usize,
    pub rates: RateSettings,
    /// Prefix of every fast-state key, so several deployments (or tests) can share one Redis.
    pub key_prefix: String,
    /// Idle interval between audit stream heartbeat comments.
    pub heartbeat: std::time::Duration,
}

pub const API_VERSION: &str = "0.5.0";

fn openapi_service() -> OpenApiService<api::AllApis, ()> {
    OpenApiService::new(api::all(), "Control plane", API_VERSION).description(docs::DESCRIPTION)
}

/// The OpenAPI document served at `/openapi.json`.
pub fn openapi_document() -> String {
    docs::finish(&openapi_service().spec())
}

/// Builds the whole application: every route behind the request-context middleware.
pub fn build_app(
    services: Arc<Services>,
    settings: &HttpSettings,
    fast: FastState,
    cipher: RecordCipher,
) -> Result<impl Endpoint<Output = poem::Response> + 'static, prometheus::Error> {
    let service = openapi_service();
    let raw_spec = service.spec();
    let spec = docs::finish(&raw_spec);
    // The UI embeds the document; serve it the finished one.
    let docs_html = service.swagger_ui_html().replace(&raw_spec, &spec);
    let metrics = Arc::new(HttpMetrics::new()?);
    if let Some(runtime) = services.policy_runtime() {
        for collector in runtime.metrics() {
            metrics.register(collector)?;
        }
    }
    let guard = Arc::new(IdempotencyGuard::new(
        fast.idempotency,
        cipher,
        settings.key_prefix.clone(),
        Operations::of(<api::AllApis as OpenApi>::meta()),
    ));
    let rates = Arc::new(RateGuard {
        limiter: fast.limiter,
        settings: settings.rates.clone(),
        prefix: settings.key_prefix.clone(),
        metrics: metrics.clone(),
    });

    let ready_services = services.clone();
    let metrics_for_route = metrics.clone();
    let routes = Route::new()
        .at(
            "/healthz",
            get(make_sync(|_| Json(serde_json::json!({ "status": "ok" })))),
        )
        .at(
            "/readyz",
            get(poem::endpoint::make(move |_| {
                let services = ready_services.clone();
                async move {
                    services
                        .ready()
                        .await
                        .map_err(|e| poem::Error::from(ApiFailure::from(e)))?;
                    Ok::<_, poem::Error>(Json(serde_json::json!({ "status": "ready" })))
                }
            })),
        )
        .at(
            "/metrics",
            get(make_sync(move |_| {
                metrics_for_route
                    .render()
                    .with_content_type("text/plain; version=0.0.4")
                    .with_status(StatusCode::OK)
            })),
        )
        .at(
            "/openapi.json",
            get(make_sync(move |_| {
                spec.clone().with_content_type("application/json")
            })),
        )
        .at("/docs", get(make_sync(move |_| Html(docs_html.clone()))))
        .nest("/", Idempotency::new(service.into_endpoint(), guard))
        .data(services.clone())
        .data(rates.clone())
        .data(api::Heartbeat(settings.heartbeat))
        // A panic becomes a bare 500 here, which the request context renders as an ApiError.
        .with(poem::middleware::CatchPanic::new());
    Ok(RequestContext::new(
        routes,
        metrics,
        services,
        rates,
        settings.body_limit,
    ))
}
