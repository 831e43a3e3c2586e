//! The policies in force in this process: the active authorizer and moderator, and a shadow
//! authorizer under evaluation. Swapped atomically when an activation arrives.
//!
//! Shadow evaluations never delay an active decision: each request offers one to a bounded
//! queue, served by [`SHADOW_WORKERS`] workers that use no decision slot; when the queue is full
//! the evaluation is dropped and counted in `policy_shadow_dropped_total`.
//!
//! Every active decision is timed and counted here, where its result and latency are known,
//! and offered to the decision log (`decisions.rs`).

use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::decisions::{
    DecisionEvent, DecisionLog, DecisionMetrics, DecisionOutcome, PolicyName, bounded_reason,
    failure_kind,
};
use super::engine::{CompiledPolicy, PolicyEngine, PolicyFailure, PolicyKind, SHADOW_WORKERS};
use super::moderation::{ModerationInput, ModerationOutcome, Verdict};
use super::wit::{AuthzInput, authz_types};
use crate::domain::CorrelationId;
use crate::service::{Authorizer, AuthzRequest, Decision, DenyStatus};

/// A disagreement between the active and the shadow authorizer.
#[derive(Debug, Clone)]
pub struct Disagreement {
    pub shadow_digest: String,
    pub operation: &'static str,
    pub principal_id: String,
    pub active: String,
    pub shadow: String,
}

/// Where disagreements go (the records store, in production).
pub type DisagreementSink = Arc<dyn Fn(Disagreement) + Send + Sync>;

/// An active policy and the name it was installed under.
#[derive(Clone)]
struct Active {
    policy: Arc<CompiledPolicy>,
    name: PolicyName,
}

/// What the log records of a decision besides its outcome, built only when it is kept.
struct Detail {
    operation: String,
    failure: Option<&'static str>,
    reason: Option<String>,
    organisation_id: Option<uuid::Uuid>,
    workspace_id: Option<uuid::Uuid>,
    correlation_id: Option<CorrelationId>,
}

pub struct PolicyRuntime {
    engine: Arc<PolicyEngine>,
    authorizer: RwLock<Active>,
    moderator: RwLock<Active>,
    shadow: RwLock<Option<Arc<CompiledPolicy>>>,
    sink: RwLock<Option<DisagreementSink>>,
    failures: prometheus::IntCounterVec,
    shadow_queue: mpsc::Sender<ShadowJob>,
    shadow_dropped: prometheus::IntCounter,
    decisions: DecisionMetrics,
    decision_log: OnceLock<Arc<dyn DecisionLog>>,
}

/// One shadow evaluation waiting for a worker: the request as the active authorizer saw it, and
/// what it answered.
struct ShadowJob {
    shadow: Arc<CompiledPolicy>,
    input: AuthzInput,
    active: String,
    sink: Option<DisagreementSink>,
}

impl ShadowJob {
    async fn run(self, engine: &Arc<PolicyEngine>) {
        let shadowed = describe(
            &engine
                .authorize_shadow(self.shadow.clone(), &self.input)
                .await,
        );
        if shadowed != self.active
            && let Some(sink) = self.sink
        {
            sink(Disagreement {
                shadow_digest: self.shadow.digest.clone(),
                operation: self.input.operation,
                principal_id: self.input.principal.token_id.to_string(),
                active: self.active,
                shadow: shadowed,
            });
        }
    }
}

/// Starts the shadow workers; they stop when the runtime (the queue's sender) is dropped.
fn start_shadow_workers(engine: &Arc<PolicyEngine>) -> mpsc::Sender<ShadowJob> {
    let (sender, receiver) = mpsc::channel::<ShadowJob>(engine.settings().shadow_queue.max(1));
    let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
    for _ in 0..SHADOW_WORKERS {
        let engine = engine.clone();
        let receiver = receiver.clone();
        tokio::spawn(async move {
            loop {
                // The lock is held only while waiting for a job, never while evaluating one.
                let Some(job) = receiver.lock().await.recv().await else {
                    return;
                };
                job.run(&engine).await;
            }
        });
    }
    sender
}

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    match lock.read() {
        Ok(guard) => guard.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

fn write<T>(lock: &RwLock<T>, value: T) {
    match lock.write() {
        Ok(mut guard) => *guard = value,
        Err(poisoned) => *poisoned.into_inner() = value,
    }
}

fn describe(decision: &Result<authz_types::AuthzDecision, PolicyFailure>) -> String {
    match decision {
        Ok(authz_types::AuthzDecision::Allow) => "allow".into(),
        Ok(authz_types::AuthzDecision::Deny(d)) => format!("deny: {}", d.reason),
        Err(e) => format!("error: {e}"),
    }
}

impl PolicyRuntime {
    /// Must be called within a Tokio runtime: it starts the shadow workers.
    pub fn new(
        engine: Arc<PolicyEngine>,
        authorizer: CompiledPolicy,
        moderator: CompiledPolicy,
    ) -> Result<Self, prometheus::Error> {
        let failures = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "policy_failures_total",
                "Policy evaluations that failed closed, by kind and reason",
            ),
            &["kind", "reason"],
        )?;
        let shadow_dropped = prometheus::IntCounter::new(
            "policy_shadow_dropped_total",
            "Shadow authorizer evaluations dropped because the shadow queue was full",
        )?;
        let shadow_queue = start_shadow_workers(&engine);
        let built_in = |policy| {
            RwLock::new(Active {
                policy: Arc::new(policy),
                name: PolicyName::built_in(),
            })
        };
        Ok(Self {
            engine,
            authorizer: built_in(authorizer),
            moderator: built_in(moderator),
            shadow: RwLock::new(None),
            sink: RwLock::new(None),
            failures,
            shadow_queue,
            shadow_dropped,
            decisions: DecisionMetrics::new()?,
            decision_log: OnceLock::new(),
        })
    }

    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }

    /// Counters to register with the metrics endpoint.
    pub fn metrics(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        let mut collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.failures.clone()),
            Box::new(self.shadow_dropped.clone()),
        ];
        collectors.extend(self.decisions.collectors());
        collectors.extend(self.engine.warm_collectors());
        if let Some(log) = self.decision_log.get() {
            collectors.extend(log.collectors());
        }
        collectors
    }

    /// `name` is what the decision log and metrics call it ([`PolicyName::built_in`] for the
    /// embedded default).
    pub fn set_authorizer(&self, policy: Arc<CompiledPolicy>, name: PolicyName) {
        write(&self.authorizer, Active { policy, name });
        self.keep_warm_in_force();
    }

    pub fn set_moderator(&self, policy: Arc<CompiledPolicy>, name: PolicyName) {
        write(&self.moderator, Active { policy, name });
        self.keep_warm_in_force();
    }

    /// Warm instances of versions no longer in force are retired: a replaced version's state
    /// does not outlive its activation, and its instances give back their pool slots.
    fn keep_warm_in_force(&self) {
        let authorizer = read(&self.authorizer).policy;
        let moderator = read(&self.moderator).policy;
        let shadow = read(&self.shadow);
        let mut in_force = vec![authorizer.as_ref(), moderator.as_ref()];
        in_force.extend(shadow.as_deref());
        self.engine.keep_warm_only(&in_force);
    }

    /// Where decisions are logged; set once, before serving (a second call is ignored).
    pub fn set_decision_log(&self, log: Arc<dyn DecisionLog>) {
        let _ = self.decision_log.set(log);
    }

    /// Counts and times a decision, and offers it to the log.
    fn note(
        &self,
        kind: PolicyKind,
        active: &Active,
        outcome: DecisionOutcome,
        latency: Duration,
        detail: impl FnOnce() -> Detail,
    ) {
        self.decisions.observe(kind, &active.name, outcome, latency);
        let Some(log) = self.decision_log.get() else {
            return;
        };
        if !log.keeps(outcome) {
            return;
        }
        let detail = detail();
        log.record(DecisionEvent {
            at: chrono::Utc::now(),
            kind,
            operation: detail.operation,
            outcome,
            failure: detail.failure,
            reason: detail.reason,
            policy: active.name.clone(),
            digest: active.policy.digest.clone(),
            latency,
            correlation_id: detail.correlation_id,
            organisation_id: detail.organisation_id,
            workspace_id: detail.workspace_id,
        });
    }

    pub fn set_shadow(&self, policy: Option<Arc<CompiledPolicy>>) {
        write(&self.shadow, policy);
        self.keep_warm_in_force();
    }

    pub fn set_disagreement_sink(&self, sink: DisagreementSink) {
        write(&self.sink, Some(sink));
    }

    pub fn active_digests(&self) -> (String, String, Option<String>) {
        (
            read(&self.authorizer).policy.digest.clone(),
            read(&self.moderator).policy.digest.clone(),
            read(&self.shadow).map(|s| s.digest.clone()),
        )
    }

    fn count_failure(&self, kind: &str, failure: &PolicyFailure, digest: &str) {
        let reason = failure_kind(failure);
        self.failures.with_label_values(&[kind, reason]).inc();
        // The span of the request carries the correlation id.
        if let PolicyFailure::Unavailable(_) = failure {
            // Overload, not a faulty policy.
            tracing::warn!(policy_kind = kind, policy_digest = digest, %failure, "policy failed closed");
        } else {
            tracing::error!(policy_kind = kind, policy_digest = digest, %failure, "policy failed closed");
        }
    }

    /// Moderates with the active moderator; any failure holds the review. `organisation` is
    /// the review's or the report's, whose turn the decision slot is; `correlation` is the
    /// request's id, for the decision log.
    pub async fn moderate(
        &self,
        input: &ModerationInput,
        organisation: uuid::Uuid,
        correlation: Option<&CorrelationId>,
    ) -> ModerationOutcome {
        let active = read(&self.moderator);
        let started = Instant::now();
        let result = self
            .engine
            .moderate(active.policy.clone(), input, organisation)
            .await;
        let latency = started.elapsed();
        let outcome = match &result {
            Ok(o) => DecisionOutcome::of_verdict(o.verdict),
            Err(_) => DecisionOutcome::Failure,
        };
        self.note(PolicyKind::Moderator, &active, outcome, latency, || {
            Detail {
                // What was moderated: a review's content, or a report about it.
                operation: (if input.report.is_some() {
                    "report"
                } else {
                    "review"
                })
                .into(),
                failure: result.as_ref().err().map(failure_kind),
                reason: match &result {
                    Ok(o) => bounded_reason(&o.reasons.join("; ")),
                    Err(e) => bounded_reason(&e.to_string()),
                },
                organisation_id: Some(organisation),
                // Reviews belong to no workspace.
                workspace_id: None,
                correlation_id: correlation.cloned(),
            }
        });
        match result {
            Ok(outcome) => outcome,
            Err(failure) => {
                self.count_failure("moderator", &failure, &active.policy.digest);
                ModerationOutcome {
                    verdict: Verdict::Hold,
                    reasons: vec!["the moderation policy could not decide; held for review".into()],
                    labels: vec!["policy-error".into()],
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl Authorizer for PolicyRuntime {
    async fn authorize(&self, request: &AuthzRequest<'_>) -> Decision {
        let (method, route) = request.operation.http();
        let input = AuthzInput {
            principal: request.principal.clone(),
            operation: request.operation.id(),
            method,
            route,
            workspace_id: request.workspace.map(str::to_owned),
            resource_ids: request
                .resources
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        };
        let active = read(&self.authorizer);
        let started = Instant::now();
        let result = self.engine.authorize(active.policy.clone(), &input).await;
        let latency = started.elapsed();
        let outcome = match &result {
            Ok(authz_types::AuthzDecision::Allow) => DecisionOutcome::Allow,
            Ok(authz_types::AuthzDecision::Deny(_)) => DecisionOutcome::Deny,
            Err(_) => DecisionOutcome::Failure,
        };
        self.note(PolicyKind::Authorizer, &active, outcome, latency, || {
            Detail {
                operation: input.operation.to_owned(),
                failure: result.as_ref().err().map(failure_kind),
                reason: match &result {
                    Ok(authz_types::AuthzDecision::Allow) => None,
                    Ok(authz_types::AuthzDecision::Deny(d)) => bounded_reason(&d.reason),
                    Err(e) => bounded_reason(&e.to_string()),
                },
                organisation_id: Some(input.principal.organisation_id),
                // The workspace of the path, when it is one (it is given as sent).
                workspace_id: input
                    .workspace_id
                    .as_deref()
                    .and_then(|w| uuid::Uuid::parse_str(w).ok()),
                correlation_id: request.principal.correlation_id.clone(),
            }
        });
        if let Some(shadow) = read(&self.shadow) {
            // Off the request's path: the shadow never delays nor changes a decision, and when
            // its workers fall behind the evaluation is dropped, not queued without bound.
            let job = ShadowJob {
                shadow,
                input,
                active: describe(&result),
                sink: read(&self.sink),
            };
            if self.shadow_queue.try_send(job).is_err() {
                self.shadow_dropped.inc();
            }
        }
        match result {
            Ok(authz_types::AuthzDecision::Allow) => Decision::Allow,
            Ok(authz_types::AuthzDecision::Deny(denial)) => Decision::Deny {
                status: match denial.status {
                    authz_types::DenyStatus::Forbidden => DenyStatus::Forbidden,
                    authz_types::DenyStatus::NotFound => DenyStatus::NotFound,
                },
                reason: denial.reason,
            },
            Err(failure) => {
                self.count_failure("authorizer", &failure, &active.policy.digest);
                match failure {
                    // No slot in time: denied too, but as an overload the client may retry.
                    PolicyFailure::Unavailable(reason) => Decision::Unavailable { reason },
                    failure => Decision::Failed {
                        reason: failure.to_string(),
                    },
                }
            }
        }
    }
}
