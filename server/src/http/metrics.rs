//! Prometheus metrics of the HTTP surface: requests by operation and status, and latency.

use poem::http::Method;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

/// One registry per application instance, so several instances can live in one process (tests).
pub struct HttpMetrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    limited: IntCounterVec,
    limiter_down: IntCounterVec,
    readiness: IntCounterVec,
}

impl HttpMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "http_requests_total",
                "HTTP requests by operation, method and status",
            ),
            &["operation", "method", "status"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "http_request_duration_seconds",
                "HTTP request latency by operation",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["operation"],
        )?;
        let limited = IntCounterVec::new(
            Opts::new(
                "rate_limited_total",
                "Requests refused with 429, by rate class",
            ),
            &["class"],
        )?;
        let limiter_down = IntCounterVec::new(
            Opts::new(
                "rate_limiter_unavailable_total",
                "Requests decided without the rate limiter, by class and outcome",
            ),
            &["class", "decision"],
        )?;
        let readiness = IntCounterVec::new(
            Opts::new(
                "readiness_pings_total",
                "Records store pings made to answer /readyz, by outcome",
            ),
            &["outcome"],
        )?;
        registry.register(Box::new(readiness.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(limited.clone()))?;
        registry.register(Box::new(limiter_down.clone()))?;
        Ok(Self {
            registry,
            requests,
            latency,
            limited,
            limiter_down,
            readiness,
        })
    }

    /// Adds a collector owned elsewhere (the policy engine's failure counters).
    pub fn register(
        &self,
        collector: Box<dyn prometheus::core::Collector>,
    ) -> Result<(), prometheus::Error> {
        self.registry.register(collector)
    }

    pub fn rate_limited(&self, class: &str) {
        self.limited.with_label_values(&[class]).inc();
    }

    pub fn limiter_unavailable(&self, class: &str, served: bool) {
        let decision = if served { "served" } else { "refused" };
        self.limiter_down
            .with_label_values(&[class, decision])
            .inc();
    }

    pub fn readiness_pinged(&self, ok: bool) {
        let outcome = if ok { "ready" } else { "not_ready" };
        self.readiness.with_label_values(&[outcome]).inc();
    }

    /// Counts one request. The method label is one of the standard methods or `other`, so an
    /// invented method cannot add a series.
    pub fn observe(&self, operation: &str, method: &Method, status: u16, seconds: f64) {
        self.requests
            .with_label_values(&[operation, method_label(method), &status.to_string()])
            .inc();
        self.latency
            .with_label_values(&[operation])
            .observe(seconds);
    }

    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        // Encoding into a Vec cannot fail for well-formed families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buffer);
        String::from_utf8(buffer).unwrap_or_default()
    }
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}
