//! Rate limits: GCRA per principal (per client address before authentication), one round trip
//! to the shared limiter per request, with a lower budget for token issuance.
//!
//! Every charge goes through [`RateGuard::check`], which also counts refusals and limiter
//! outages in the metrics: the middleware's (per token, or per address) and a signed runner's
//! (per runner, once its signature is verified inside the route).

use std::sync::{Arc, Mutex};

use poem::Request;
use poem::http::Method;

use super::error::ApiFailure;
use super::metrics::HttpMetrics;
use crate::service::ServiceError;
use crate::storage::{Rate, RateDecision, RateLimiter};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateClass {
    Read,
    Write,
    Issue,
}

impl RateClass {
    pub fn of(method: &Method, path: &str) -> Self {
        if method == Method::POST && path == "/v1/personal-access-tokens" {
            RateClass::Issue
        } else if method == Method::GET || method == Method::HEAD {
            RateClass::Read
        } else {
            RateClass::Write
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RateClass::Read => "read",
            RateClass::Write => "write",
            RateClass::Issue => "issue",
        }
    }
}

/// Limits and what to do when the limiter cannot be reached.
#[derive(Debug, Clone)]
pub struct RateSettings {
    /// `None`: no limit (and no limiter round trip).
    pub default: Option<Rate>,
    pub issue: Option<Rate>,
    /// Refuse every request (503) while the limiter is down, instead of the default policy:
    /// reads and ordinary writes are served, token issuance is refused.
    pub fail_closed: bool,
}

impl RateSettings {
    pub fn rate(&self, class: RateClass) -> Option<Rate> {
        if class == RateClass::Issue {
            self.issue
        } else {
            self.default
        }
    }

    pub fn open_when_unavailable(&self, class: RateClass) -> bool {
        !self.fail_closed && class != RateClass::Issue
    }
}

pub struct RateGuard {
    pub limiter: Arc<dyn RateLimiter>,
    pub settings: RateSettings,
    pub prefix: String,
    pub metrics: Arc<HttpMetrics>,
}

/// The allowed decision of a charge made inside the route, for the headers of a successful
/// response (which then show the runner's budget, not the address's). The middleware puts an
/// empty one in every request.
#[derive(Debug, Clone, Default)]
pub struct RouteDecision(Arc<Mutex<Option<RateDecision>>>);

impl RouteDecision {
    pub fn get(&self) -> Option<RateDecision> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, decision: RateDecision) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(decision);
    }
}

impl RateGuard {
    pub fn key(&self, subject: &str, class: RateClass) -> String {
        let bucket = if class == RateClass::Issue {
            "issue"
        } else {
            "all"
        };
        crate::storage::keys::rate_limit(&self.prefix, subject, bucket)
    }
}

impl RateGuard {
    /// One request of `subject` against its budget: the decision when allowed (for the
    /// headers), a 429 when not, and the class's policy when the limiter is down.
    pub async fn check(
        &self,
        subject: &str,
        class: RateClass,
    ) -> Result<Option<RateDecision>, ApiFailure> {
        let Some(rate) = self.settings.rate(class) else {
            return Ok(None);
        };
        match self.limiter.check(&self.key(subject, class), rate).await {
            Ok(decision) if decision.allowed => Ok(Some(decision)),
            Ok(decision) => {
                self.metrics.rate_limited(class.as_str());
                Err(ApiFailure::rate_limited(decision))
            }
            Err(e) => {
                let open = self.settings.open_when_unavailable(class);
                self.metrics.limiter_unavailable(class.as_str(), open);
                tracing::warn!(error = %e, class = class.as_str(), serve = open, "rate limiter unavailable");
                if open {
                    Ok(None)
                } else {
                    Err(ServiceError::Unavailable.into())
                }
            }
        }
    }

    /// [`check`](Self::check), for a principal authenticated inside the route.
    pub async fn charge_in_route(
        &self,
        req: &Request,
        subject: &str,
        class: RateClass,
    ) -> Result<(), ApiFailure> {
        let decision = self.check(subject, class).await?;
        if let (Some(decision), Some(slot)) = (decision, req.data::<RouteDecision>()) {
            slot.set(decision);
        }
        Ok(())
    }
}
