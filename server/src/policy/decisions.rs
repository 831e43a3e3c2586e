//! What every policy decision leaves behind: the `policy_decision_seconds` histogram and the
//! `policy_decisions_total` counter (every decision), and a [`DecisionEvent`] for the decision
//! log (a sample of the allowing ones, every other one) handed to a [`DecisionLog`] that must
//! never wait. The runtime (`runtime.rs`) calls this where a decision's result and latency are
//! known; the service layer's recorder samples, queues and writes (`service/policy_decisions.rs`).
//!
//! The request's correlation id reaches the runtime with the question: on the
//! [`Principal`](crate::domain::Principal) an authorization names, beside the input a moderation
//! decides on.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use prometheus::core::Collector;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};
use uuid::Uuid;

use super::engine::{PolicyFailure, PolicyKind};
use super::moderation::Verdict;
use crate::domain::CorrelationId;

/// Longest deny reason kept in the log, in characters; a policy's reasons are its own text.
pub const REASON_MAX: usize = 500;

/// Buckets of `policy_decision_seconds`: the built-in authorizer takes tens of microseconds, an
/// installed one hundreds, and the default deadline is 50 ms.
const BUCKETS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1,
];

/// Which policy decided: `name@version`, the built-in defaults being `built-in@0` (an
/// installed version is 1 or more, so the two never collide).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyName {
    name: Arc<str>,
    version: i32,
}

impl PolicyName {
    pub const BUILT_IN: &'static str = "built-in";

    pub fn built_in() -> Self {
        Self {
            name: Self::BUILT_IN.into(),
            version: 0,
        }
    }

    pub fn installed(name: &str, version: i32) -> Self {
        Self {
            name: name.into(),
            version,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn version(&self) -> i32 {
        self.version
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// What a decision came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionOutcome {
    Allow,
    Deny,
    Publish,
    Hold,
    Reject,
    Hide,
    /// The policy could not decide (the failure kind is recorded beside it).
    Failure,
}

impl DecisionOutcome {
    pub const ALL: [DecisionOutcome; 7] = [
        DecisionOutcome::Allow,
        DecisionOutcome::Deny,
        DecisionOutcome::Publish,
        DecisionOutcome::Hold,
        DecisionOutcome::Reject,
        DecisionOutcome::Hide,
        DecisionOutcome::Failure,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DecisionOutcome::Allow => "allow",
            DecisionOutcome::Deny => "deny",
            DecisionOutcome::Publish => "publish",
            DecisionOutcome::Hold => "hold",
            DecisionOutcome::Reject => "reject",
            DecisionOutcome::Hide => "hide",
            DecisionOutcome::Failure => "failure",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str() == raw)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|o| o.as_str()).collect();
                format!(
                    "`{raw}` is not an outcome; expected one of {}",
                    names.join(", ")
                )
            })
    }

    /// An allow or a publish: the everyday answer, the one the log samples.
    pub fn is_routine(self) -> bool {
        matches!(self, DecisionOutcome::Allow | DecisionOutcome::Publish)
    }

    pub(super) fn of_verdict(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Publish => DecisionOutcome::Publish,
            Verdict::Hold => DecisionOutcome::Hold,
            Verdict::Reject => DecisionOutcome::Reject,
            Verdict::Hide => DecisionOutcome::Hide,
        }
    }
}

impl std::str::FromStr for DecisionOutcome {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        Self::parse(raw)
    }
}

/// The kind of a failure, as `policy_failures_total` and the decision log name it.
pub fn failure_kind(failure: &PolicyFailure) -> &'static str {
    match failure {
        PolicyFailure::Timeout => "timeout",
        PolicyFailure::Memory => "memory",
        PolicyFailure::Trap(_) => "trap",
        PolicyFailure::Instantiate(_) => "instantiate",
        PolicyFailure::Unavailable(_) => "unavailable",
    }
}

/// One decision, for the log. Nothing of the request's body: the operation, the policy's
/// answer, and who asked (organisation, workspace, correlation id).
#[derive(Debug, Clone)]
pub struct DecisionEvent {
    pub at: DateTime<Utc>,
    pub kind: PolicyKind,
    pub operation: String,
    pub outcome: DecisionOutcome,
    pub failure: Option<&'static str>,
    pub reason: Option<String>,
    pub policy: PolicyName,
    pub digest: String,
    pub latency: Duration,
    pub correlation_id: Option<CorrelationId>,
    pub organisation_id: Option<Uuid>,
    pub workspace_id: Option<Uuid>,
}

/// Where decisions go. Both methods run on the request's path: they must not wait.
pub trait DecisionLog: Send + Sync {
    /// Whether a decision with this outcome is kept (the sampling rule); asked first, so that
    /// a decision not kept costs no event.
    fn keeps(&self, outcome: DecisionOutcome) -> bool;
    /// Takes a kept decision; at worst drops it.
    fn record(&self, event: DecisionEvent);
    /// Its own counters, published with the runtime's.
    fn collectors(&self) -> Vec<Box<dyn Collector>>;
}

/// The two decision metrics. The `policy` label is a policy's name: the installed ones and
/// `built-in`, so its values are bounded by what an operator installs.
#[derive(Clone)]
pub struct DecisionMetrics {
    seconds: HistogramVec,
    total: IntCounterVec,
}

impl DecisionMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let seconds = HistogramVec::new(
            HistogramOpts::new(
                "policy_decision_seconds",
                "Time a policy decision took, waiting for a decision slot included",
            )
            .buckets(BUCKETS.to_vec()),
            &["kind", "policy"],
        )?;
        let total = IntCounterVec::new(
            Opts::new(
                "policy_decisions_total",
                "Policy decisions, by kind, policy name and outcome",
            ),
            &["kind", "policy", "outcome"],
        )?;
        Ok(Self { seconds, total })
    }

    pub fn observe(
        &self,
        kind: PolicyKind,
        policy: &PolicyName,
        outcome: DecisionOutcome,
        latency: Duration,
    ) {
        self.seconds
            .with_label_values(&[kind.as_str(), policy.name()])
            .observe(latency.as_secs_f64());
        self.total
            .with_label_values(&[kind.as_str(), policy.name(), outcome.as_str()])
            .inc();
    }

    pub fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![Box::new(self.seconds.clone()), Box::new(self.total.clone())]
    }
}

/// A reason as the log keeps it: at most [`REASON_MAX`] characters, `None` when empty.
pub fn bounded_reason(raw: &str) -> Option<String> {
    let kept: String = raw.chars().take(REASON_MAX).collect();
    (!kept.is_empty()).then_some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_parse_back_and_only_allow_and_publish_are_routine() {
        for outcome in DecisionOutcome::ALL {
            assert_eq!(DecisionOutcome::parse(outcome.as_str()), Ok(outcome));
        }
        let routine: Vec<_> = DecisionOutcome::ALL
            .into_iter()
            .filter(|o| o.is_routine())
            .collect();
        assert_eq!(routine, [DecisionOutcome::Allow, DecisionOutcome::Publish]);
        assert!(
            DecisionOutcome::parse("denied")
                .unwrap_err()
                .contains("allow, deny")
        );
    }

    #[test]
    fn a_reason_is_bounded() {
        assert_eq!(bounded_reason(""), None);
        let long = "é".repeat(REASON_MAX + 3);
        assert_eq!(bounded_reason(&long).unwrap().chars().count(), REASON_MAX);
    }

    #[test]
    fn the_built_in_name_cannot_be_an_installed_version() {
        assert_eq!(PolicyName::built_in().to_string(), "built-in@0");
        assert_eq!(PolicyName::installed("acme", 3).to_string(), "acme@3");
    }
}
