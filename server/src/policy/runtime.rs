//! The policies in force in this process: the active authorizer and moderator, and a shadow
//! authorizer under evaluation. Swapped atomically when an activation arrives.

use std::sync::{Arc, RwLock};

use super::engine::{
    CompiledPolicy, ModerationInput, ModerationOutcome, PolicyEngine, PolicyFailure, Verdict,
};
use super::wit::{AuthzInput, authz_types};
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

pub struct PolicyRuntime {
    engine: Arc<PolicyEngine>,
    authorizer: RwLock<Arc<CompiledPolicy>>,
    moderator: RwLock<Arc<CompiledPolicy>>,
    shadow: RwLock<Option<Arc<CompiledPolicy>>>,
    sink: RwLock<Option<DisagreementSink>>,
    failures: prometheus::IntCounterVec,
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
        Ok(Self {
            engine,
            authorizer: RwLock::new(Arc::new(authorizer)),
            moderator: RwLock::new(Arc::new(moderator)),
            shadow: RwLock::new(None),
            sink: RwLock::new(None),
            failures,
        })
    }

    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }

    /// Counters to register with the metrics endpoint.
    pub fn failures(&self) -> prometheus::IntCounterVec {
        self.failures.clone()
    }

    pub fn set_authorizer(&self, policy: Arc<CompiledPolicy>) {
        write(&self.authorizer, policy);
    }

    pub fn set_moderator(&self, policy: Arc<CompiledPolicy>) {
        write(&self.moderator, policy);
    }

    pub fn set_shadow(&self, policy: Option<Arc<CompiledPolicy>>) {
        write(&self.shadow, policy);
    }

    pub fn set_disagreement_sink(&self, sink: DisagreementSink) {
        write(&self.sink, Some(sink));
    }

    pub fn active_digests(&self) -> (String, String, Option<String>) {
        (
            read(&self.authorizer).digest.clone(),
            read(&self.moderator).digest.clone(),
            read(&self.shadow).map(|s| s.digest.clone()),
        )
    }

    fn count_failure(&self, kind: &str, failure: &PolicyFailure, digest: &str) {
        let reason = match failure {
            PolicyFailure::Timeout => "timeout",
            PolicyFailure::Memory => "memory",
            PolicyFailure::Trap(_) => "trap",
            PolicyFailure::Instantiate(_) => "instantiate",
            PolicyFailure::Unavailable(_) => "unavailable",
        };
        self.failures.with_label_values(&[kind, reason]).inc();
        // The span of the request carries the correlation id.
        tracing::error!(policy_kind = kind, policy_digest = digest, %failure, "policy failed closed");
    }

    /// Moderates with the active moderator; any failure holds the review.
    pub async fn moderate(&self, input: &ModerationInput) -> ModerationOutcome {
        let policy = read(&self.moderator);
        match self.engine.moderate(policy.clone(), input).await {
            Ok(outcome) => outcome,
            Err(failure) => {
                self.count_failure("moderator", &failure, &policy.digest);
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
        let policy = read(&self.authorizer);
        let result = self.engine.authorize(policy.clone(), &input).await;
        if let Some(shadow) = read(&self.shadow) {
            // Off the request's path: the shadow never delays nor changes a decision.
            let engine = self.engine.clone();
            let sink = read(&self.sink);
            let active = describe(&result);
            let input = input.clone();
            tokio::spawn(async move {
                let shadowed = describe(&engine.authorize(shadow.clone(), &input).await);
                if shadowed != active
                    && let Some(sink) = sink
                {
                    sink(Disagreement {
                        shadow_digest: shadow.digest.clone(),
                        operation: input.operation,
                        principal_id: input.principal.token_id.to_string(),
                        active,
                        shadow: shadowed,
                    });
                }
            });
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
                self.count_failure("authorizer", &failure, &policy.digest);
                Decision::Failed {
                    reason: failure.to_string(),
                }
            }
        }
    }
}
