//! The endpoints outside `/v1`: the operator's (`/healthz`, `/readyz`, `/metrics`) and the
//! published documents (`/openapi.json`, `/docs`, and the webhook signing keys at
//! `/.well-known/jwks.json`).
//!
//! They carry no principal, so [`OpsLimit`] charges each client address against a budget of
//! its own, in this process: a probe must keep working while Redis is down, readiness is a
//! per-replica answer anyway, and an in-process bucket costs no round trip. `/readyz` answers
//! from [`Readiness`], refreshed at most once a second by one caller at a time, so a flood of
//! probes costs no store connections. The operator's three can move to a listener of their own
//! (`--ops-listen`); the documents stay with the API, whose clients read them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use poem::endpoint::make_sync;
use poem::http::{Method, StatusCode};
use poem::web::{Html, Json};
use poem::{Endpoint, IntoResponse, Request, Response, Route, get};

use super::context::client_address;
use super::error::ApiFailure;
use super::metrics::HttpMetrics;
use crate::domain::operation;
use crate::service::{ServiceError, Services};
use crate::storage::keys::{self, RateScope};
use crate::storage::{Bucket, Rate, RateLimiter};

/// The operator's routes: what `--ops-listen` moves.
pub const OPERATOR_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];
/// The published documents, always served beside the API.
pub const DOCUMENT_PATHS: [&str; 3] = ["/openapi.json", "/docs", JWKS_PATH];
/// The public keys webhooks to runners are signed with (RFC 7517 key set).
pub const JWKS_PATH: &str = "/.well-known/jwks.json";
/// Runners may cache the key set this long; a rotation's overlap must be longer.
const JWKS_MAX_AGE_SECS: u32 = 300;

/// Whether this process can serve: the last store ping's outcome, at most `every` old.
pub struct Readiness {
    services: Arc<Services>,
    metrics: Arc<HttpMetrics>,
    every: Duration,
    timeout: Duration,
    last: Mutex<Option<(Instant, bool)>>,
    /// Held by the one caller refreshing; the others answer from `last`.
    refreshing: tokio::sync::Mutex<()>,
}

impl Readiness {
    pub fn new(services: Arc<Services>, metrics: Arc<HttpMetrics>) -> Self {
        Self {
            services,
            metrics,
            every: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            last: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    fn fresh(&self) -> Option<bool> {
        let last = *self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.filter(|(at, _)| at.elapsed() < self.every)
            .map(|(_, ok)| ok)
    }

    fn previous(&self) -> Option<bool> {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|(_, ok)| ok)
    }

    pub async fn ready(&self) -> bool {
        if let Some(ok) = self.fresh() {
            return ok;
        }
        let _refreshing = match self.refreshing.try_lock() {
            Ok(guard) => guard,
            // Someone is pinging: answer from the last outcome, or wait for the first one.
            Err(_) => match self.previous() {
                Some(ok) => return ok,
                None => self.refreshing.lock().await,
            },
        };
        if let Some(ok) = self.fresh() {
            return ok;
        }
        let ok = matches!(
            tokio::time::timeout(self.timeout, self.services.ready()).await,
            Ok(Ok(()))
        );
        if !ok {
            tracing::warn!("not ready: the records store did not answer its ping");
        }
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), ok));
        self.metrics.readiness_pinged(ok);
        ok
    }
}

/// Charges every request to the wrapped routes to its client address's bucket in this process.
pub struct OpsLimit<E> {
    inner: E,
    limiter: Arc<dyn RateLimiter>,
    rate: Option<Rate>,
    metrics: Arc<HttpMetrics>,
}

impl<E: Endpoint> Endpoint for OpsLimit<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        if let Some(rate) = self.rate {
            let address = client_address(&req);
            let bucket = Bucket {
                key: keys::rate_limit("", RateScope::Address(address), "ops"),
                rate,
            };
            // The in-process limiter has no outage to handle.
            if let Ok(verdict) = self.limiter.check(&[bucket]).await
                && !verdict.decision.allowed
            {
                self.metrics.rate_limited("ops");
                return Err(ApiFailure::rate_limited(verdict.decision).into());
            }
        }
        self.inner.call(req).await.map(IntoResponse::into_response)
    }
}

/// The operator's routes, limited.
pub fn operator_routes(
    readiness: Arc<Readiness>,
    metrics: Arc<HttpMetrics>,
    limiter: Arc<dyn RateLimiter>,
    rate: Option<Rate>,
) -> OpsLimit<Route> {
    let for_route = metrics.clone();
    let routes = Route::new()
        .at(
            "/healthz",
            get(make_sync(|_| Json(serde_json::json!({ "status": "ok" })))),
        )
        .at(
            "/readyz",
            get(poem::endpoint::make(move |_| {
                let readiness = readiness.clone();
                async move {
                    if !readiness.ready().await {
                        return Err(poem::Error::from(ApiFailure::from(
                            ServiceError::Unavailable,
                        )));
                    }
                    let mut body = serde_json::json!({ "status": "ready" });
                    // A replica that is down or lagging does not make this process unready:
                    // its reads go to the primary. It is reported for the operator.
                    if let Some(replica) = readiness.services.read_replica() {
                        let status = replica.health().status();
                        body["readReplica"] = serde_json::json!({
                            "available": status.available,
                            "answering": status.up,
                            "lagSeconds": status.lag.map(|lag| lag.as_secs_f64()),
                            "maxLagSeconds": status.max_lag.as_secs_f64(),
                        });
                    }
                    Ok::<_, poem::Error>(Json(body))
                }
            })),
        )
        .at(
            "/metrics",
            get(make_sync(move |_| {
                for_route
                    .render()
                    .with_content_type("text/plain; version=0.0.4")
                    .with_status(StatusCode::OK)
            })),
        );
    OpsLimit {
        inner: routes,
        limiter,
        rate,
        metrics,
    }
}

/// The document routes, limited. `jwks` is the key set, serialised once: the keys change only
/// with a restart.
pub fn document_routes(
    spec: String,
    docs_html: String,
    jwks: String,
    metrics: Arc<HttpMetrics>,
    limiter: Arc<dyn RateLimiter>,
    rate: Option<Rate>,
) -> OpsLimit<Route> {
    let routes = Route::new()
        .at(
            "/openapi.json",
            get(make_sync(move |_| {
                spec.clone().with_content_type("application/json")
            })),
        )
        .at("/docs", get(make_sync(move |_| Html(docs_html.clone()))))
        .at(
            JWKS_PATH,
            get(make_sync(move |_| {
                jwks.clone()
                    .with_content_type("application/jwk-set+json")
                    .with_header(
                        poem::http::header::CACHE_CONTROL,
                        format!("max-age={JWKS_MAX_AGE_SECS}"),
                    )
            })),
        );
    OpsLimit {
        inner: routes,
        limiter,
        rate,
        metrics,
    }
}

/// The routes: the methods each accepts, for the `Allow` header of a 405 (RFC 9110 §15.5.6),
/// and the operation a request on each names, so a request refused before routing (a 429, a
/// 401, a 405) is still counted under its operation. The v1 routes come from the operation
/// table (`domain::operation`).
pub struct AllowedMethods(Vec<RouteMethods>);

struct RouteMethods {
    segments: Vec<String>,
    allow: String,
    operations: Vec<(Method, &'static str)>,
}

impl AllowedMethods {
    /// The table's operations, and the routes outside it (all `GET`).
    pub fn of(plain_get: &[&str]) -> Self {
        // Each route's segments, and its methods with the operation each names.
        type Methods = Vec<(Method, Option<&'static str>)>;
        let mut routes: Vec<(Vec<String>, Methods)> = Vec::new();
        let table = operation::OPERATIONS.iter().filter_map(|op| {
            let method = Method::from_bytes(op.method.as_bytes()).ok()?;
            Some((op.route, method, Some(op.id)))
        });
        let plain = plain_get.iter().map(|p| (*p, Method::GET, None));
        for (path, method, id) in table.chain(plain) {
            let segments = segments_of(path);
            match routes.iter_mut().find(|(s, _)| *s == segments) {
                Some((_, methods)) => methods.push((method, id)),
                None => routes.push((segments, vec![(method, id)])),
            }
        }
        Self(
            routes
                .into_iter()
                .map(|(segments, methods)| RouteMethods {
                    allow: allow_value(methods.iter().map(|(m, _)| m.clone()).collect()),
                    operations: methods
                        .into_iter()
                        .filter_map(|(m, id)| id.map(|id| (m, id)))
                        .collect(),
                    segments,
                })
                .collect(),
        )
    }

    /// The route `path` matches; the route with the most literal segments wins, as in the
    /// router.
    fn route(&self, path: &str) -> Option<&RouteMethods> {
        let given: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        self.0
            .iter()
            .filter(|route| {
                route.segments.len() == given.len()
                    && route
                        .segments
                        .iter()
                        .zip(&given)
                        .all(|(s, g)| s == "{}" && !g.is_empty() || s == g)
            })
            .max_by_key(|route| route.segments.iter().filter(|s| *s != "{}").count())
    }

    /// The `Allow` value of the route `path` matches.
    pub fn allow(&self, path: &str) -> Option<&str> {
        self.route(path).map(|route| route.allow.as_str())
    }

    /// The operation a request names on the route `path` matches: its method's (`HEAD` as its
    /// `GET`), or, for a method the route does not have (a 405), the route's first operation:
    /// the request addressed that operation's resource, and its `method` label tells the rest.
    /// `None` off every operation's route (a 404, the routes outside `/v1`).
    pub fn operation(&self, method: &Method, path: &str) -> Option<&'static str> {
        let method = if *method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        let operations = &self.route(path)?.operations;
        operations
            .iter()
            .find(|(m, _)| m == method)
            .or_else(|| operations.first())
            .map(|(_, id)| *id)
    }
}

/// The route's segments with its variables unnamed (`{}`), the document's `{id}` and the
/// router's `:param0` alike.
fn segments_of(path: &str) -> Vec<String> {
    path.trim_end_matches('/')
        .split('/')
        .map(|segment| {
            if operation::is_variable(segment) {
                "{}".to_owned()
            } else {
                segment.to_owned()
            }
        })
        .collect()
}

/// `GET` routes also answer `HEAD` (the router turns one into the other).
fn allow_value(mut methods: Vec<Method>) -> String {
    if methods.contains(&Method::GET) && !methods.contains(&Method::HEAD) {
        methods.push(Method::HEAD);
    }
    const ORDER: [Method; 7] = [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::OPTIONS,
    ];
    methods.sort_by_key(|m| ORDER.iter().position(|o| o == m).unwrap_or(ORDER.len()));
    methods.dedup();
    methods
        .iter()
        .map(Method::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> AllowedMethods {
        AllowedMethods::of(&["/healthz", "/metrics"])
    }

    #[test]
    fn allow_lists_the_matched_routes_methods_with_head_for_get() {
        let table = table();
        assert_eq!(table.allow("/v1/workspaces/w1/activity"), Some("GET, HEAD"));
        assert_eq!(table.allow("/v1/personal-access-tokens"), Some("POST"));
        assert_eq!(
            table.allow("/v1/marketplace/plugins/p1/reviews/me"),
            Some("PUT")
        );
        assert_eq!(table.allow("/healthz"), Some("GET, HEAD"));
        assert_eq!(table.allow("/v1/workspaces//activity"), None);
        assert_eq!(table.allow("/v1/nothing"), None);
    }

    /// A 401 or a 429 is answered before the router runs, and a 405 by the router without an
    /// operation: each is still counted under the operation its path and method name.
    #[test]
    fn a_request_refused_before_routing_names_its_operation() {
        let table = table();
        let cases = [
            (
                Method::GET,
                "/v1/workspaces/w1/activity",
                Some("listActivity"),
            ),
            (
                Method::HEAD,
                "/v1/workspaces/w1/activity",
                Some("listActivity"),
            ),
            (
                Method::DELETE,
                "/v1/workspaces/w1/access-tokens/t1",
                Some("revokeWorkspaceAccessToken"),
            ),
            (
                Method::POST,
                "/v1/runner/webhook-deliveries/d1/status",
                Some("reportDeliveryStatus"),
            ),
            // A 405: the route's operation, with the method label telling it apart.
            (
                Method::PATCH,
                "/v1/personal-access-tokens",
                Some("issuePersonalAccessToken"),
            ),
            // No operation: a 404, the routes outside /v1.
            (Method::GET, "/v1/nothing", None),
            (Method::GET, "/healthz", None),
            (Method::POST, "/healthz", None),
        ];
        for (method, path, expected) in cases {
            assert_eq!(table.operation(&method, path), expected, "{method} {path}");
        }
    }

    #[test]
    fn every_operation_is_named_by_its_own_route_and_method() {
        let table = table();
        for op in &operation::OPERATIONS {
            let path = op.route.replace(['{', '}'], "");
            let method = Method::from_bytes(op.method.as_bytes()).unwrap();
            assert_eq!(table.operation(&method, &path), Some(op.id), "{}", op.id);
        }
    }
}
