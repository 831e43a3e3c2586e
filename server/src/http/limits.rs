//! Rate limits: GCRA, one round trip to the shared limiter per charge, with the most
//! restrictive of several budgets answering.
//!
//! What a request spends ([`Caller`]):
//! - a bearer token's request: its token's, its user's and its organisation's budgets, all
//!   checked and charged at once (one round trip; a refusal charges none). A user's 500 tokens
//!   share one user budget, and an organisation's users one organisation budget. Token
//!   issuance also spends the user's issuance budget (per user, not per token);
//! - a request without a valid bearer token: its client address's budget (and its issuance
//!   budget, for issuance);
//! - a signed runner request: before its signature is checked, its client address's *runner*
//!   budget, a bucket of its own, so bearer junk from the same address (a NAT, a load
//!   balancer) never starves runners, and a failed signature spends only that bucket; once the
//!   signature verifies, inside the route, the runner's own budget.
//!
//! The headers report the bucket that refused (the longest wait), or, when allowed, the
//! tightest one (fewest requests left). Every charge goes through [`RateGuard::check`], which
//! also counts refusals and limiter outages in the metrics.

use std::sync::{Arc, Mutex};

use poem::Request;
use uuid::Uuid;

use super::error::ApiFailure;
use super::metrics::HttpMetrics;
use crate::domain::Principal;
use crate::service::ServiceError;
use crate::storage::keys::{RateScope, rate_limit};
use crate::storage::{Bucket, Rate, RateDecision, RateLimiter};

pub use crate::domain::RateClass;

/// Limits and what to do when the limiter cannot be reached. Each `None` is no limit; a
/// request none of whose budgets is limited makes no limiter round trip.
#[derive(Debug, Clone)]
pub struct RateSettings {
    /// Per token, and per client address without a valid token.
    pub default: Option<Rate>,
    /// Per user, over all of its tokens.
    pub user: Option<Rate>,
    /// Per organisation, over all of its users.
    pub organisation: Option<Rate>,
    /// Token issuance, per user (per client address without a valid token).
    pub issue: Option<Rate>,
    /// Signed runner requests per client address, before the signature is checked.
    pub runner_address: Option<Rate>,
    /// Per runner, once its signature verified.
    pub runner: Option<Rate>,
    /// Refuse every request (503) while the limiter is down, instead of the default policy:
    /// reads and ordinary writes are served, token issuance is refused.
    pub fail_closed: bool,
}

impl RateSettings {
    pub fn open_when_unavailable(&self, class: RateClass) -> bool {
        !self.fail_closed && class != RateClass::Issue
    }
}

/// Who a request is charged to.
#[derive(Debug, Clone, Copy)]
pub enum Caller<'a> {
    /// An authenticated bearer token.
    Token(&'a Principal),
    /// A request without a valid bearer token, by client address.
    Address(&'a str),
    /// A signed runner request before its signature is checked, by client address.
    RunnerAddress(&'a str),
    /// A runner whose signature verified.
    Runner(Uuid),
}

pub struct RateGuard {
    pub limiter: Arc<dyn RateLimiter>,
    pub settings: RateSettings,
    pub prefix: String,
    pub metrics: Arc<HttpMetrics>,
}

/// What the route's charges decided, for the headers: admission's (`http/admission.rs`), and
/// the allowed decision of a charge made later inside the route (a runner's, once its signature
/// verified), of which a successful response shows the tighter. The middleware puts an empty
/// one in every request, and learns from it whether any operation admitted the request.
#[derive(Debug, Clone, Default)]
pub struct RouteDecision(Arc<Mutex<RouteState>>);

#[derive(Debug, Clone, Copy, Default)]
struct RouteState {
    admitted: bool,
    admission: Option<RateDecision>,
    in_route: Option<RateDecision>,
}

impl RouteDecision {
    fn state(&self) -> RouteState {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, change: impl FnOnce(&mut RouteState)) {
        change(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// An operation admitted the request, with this decision of its budgets.
    pub fn admitted(&self, decision: Option<RateDecision>) {
        self.update(|s| {
            s.admitted = true;
            s.admission = decision;
        });
    }

    /// Whether an operation's route admitted the request (`false`: none took it).
    pub fn was_admitted(&self) -> bool {
        self.state().admitted
    }

    pub fn admission(&self) -> Option<RateDecision> {
        self.state().admission
    }

    /// The allowed decision of the charge made after admission, if any.
    pub fn get(&self) -> Option<RateDecision> {
        self.state().in_route
    }

    fn set(&self, decision: RateDecision) {
        self.update(|s| s.in_route = Some(decision));
    }
}

impl RateGuard {
    /// The buckets a request of `caller` in `class` spends, with their limits.
    pub fn buckets(&self, caller: Caller<'_>, class: RateClass) -> Vec<Bucket> {
        let s = &self.settings;
        let issue = class == RateClass::Issue;
        let wanted: Vec<(RateScope<'_>, &str, Option<Rate>)> = match caller {
            Caller::Token(p) => {
                let (organisation, user) = (p.organisation_id, p.user_id);
                let token = RateScope::Token {
                    organisation,
                    token: p.token_id,
                };
                let user = RateScope::User { organisation, user };
                let mut all = vec![
                    (token, "all", s.default),
                    (user, "all", s.user),
                    (RateScope::Organisation(organisation), "all", s.organisation),
                ];
                if issue {
                    all.insert(0, (user, "issue", s.issue));
                }
                all
            }
            Caller::Address(address) => {
                let scope = RateScope::Address(address);
                let mut all = vec![(scope, "all", s.default)];
                if issue {
                    all.insert(0, (scope, "issue", s.issue));
                }
                all
            }
            Caller::RunnerAddress(address) => {
                vec![(RateScope::RunnerAddress(address), "all", s.runner_address)]
            }
            Caller::Runner(runner) => vec![(RateScope::Runner(runner), "all", s.runner)],
        };
        wanted
            .into_iter()
            .filter_map(|(scope, bucket, rate)| {
                Some(Bucket {
                    key: rate_limit(&self.prefix, scope, bucket),
                    rate: rate?,
                })
            })
            .collect()
    }
}

/// Of two allowed decisions, the one with fewer requests left (the first of equals).
pub fn tightest(first: RateDecision, second: RateDecision) -> RateDecision {
    if second.remaining < first.remaining {
        second
    } else {
        first
    }
}

impl RateGuard {
    /// One request of `caller` against its budgets: the reported decision when allowed (for
    /// the headers), a 429 when not, and the class's policy when the limiter is down.
    pub async fn check(
        &self,
        caller: Caller<'_>,
        class: RateClass,
    ) -> Result<Option<RateDecision>, ApiFailure> {
        let buckets = self.buckets(caller, class);
        if buckets.is_empty() {
            return Ok(None);
        }
        match self.limiter.check(&buckets).await {
            Ok(verdict) if verdict.decision.allowed => Ok(Some(verdict.decision)),
            Ok(verdict) => {
                self.metrics.rate_limited(class.as_str());
                Err(ApiFailure::rate_limited(verdict.decision))
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

    /// [`check`](Self::check), for a caller authenticated inside the route.
    pub async fn charge_in_route(
        &self,
        req: &Request,
        caller: Caller<'_>,
        class: RateClass,
    ) -> Result<(), ApiFailure> {
        let decision = self.check(caller, class).await?;
        if let (Some(decision), Some(slot)) = (decision, req.data::<RouteDecision>()) {
            slot.set(decision);
        }
        Ok(())
    }
}
