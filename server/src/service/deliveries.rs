//! Outgoing webhook deliveries: a submitted command is sent to one runner of its pool, signed
//! as Standard Webhooks with that runner's own secret and the control plane's key, retried on a
//! schedule, and failed when the schedule runs out.
//!
//! The rules live here: which URLs a runner may register and the control plane may send to
//! ([`EgressPolicy`]), what an answer means (a 2xx is an acknowledgement and moves nothing;
//! anything else is a failure), when the next attempt is due ([`RetrySchedule`]) and what the
//! last failure writes. The records store shares the work between replicas (see
//! `storage/records/ports/deliveries.rs`): an attempt is leased, sent outside any transaction, then
//! recorded. A replica that dies between the send and the record leaves the delivery due again
//! when its lease ends, and the next attempt carries the same `webhook-id` (the delivery's id),
//! so a runner that deduplicates on it runs a command once.

use std::time::Duration;

use serde_json::json;
use uuid::Uuid;

use super::fair_share::BreakerSettings;
use super::runner_admin::DisableRule;
use super::runners::runner_event;
use super::{ServiceError, Services};
use crate::domain::{
    DISPATCH_EVENT_TYPE, DeliveryStatus, DeliveryUrl, DispatchData, DispatchPayload, EgressPolicy,
    FieldError, NewAuditEvent, RetrySchedule, Timestamp, ValidationErrors,
};
use crate::storage::{
    AttemptNext, AttemptRecorded, AttemptResult, DeliveryReport, DueDelivery, DueQuery, Leased,
    LeasedAttempt, Runner, WriteContext,
};

/// How deliveries are sent (server flags `--delivery-*`).
#[derive(Debug, Clone)]
pub struct DeliverySettings {
    pub egress: EgressPolicy,
    pub schedule: RetrySchedule,
    /// To open the connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// For the whole attempt, up to the response's headers and the bounded body.
    pub total_timeout: Duration,
    /// Attempts in flight at once in this process; 0: this process sends none.
    pub concurrency: usize,
    /// Of them, to one pool and to one organisation's pools (see `fair_share.rs`).
    pub per_pool: usize,
    pub per_organisation: usize,
    pub breaker: BreakerSettings,
    /// When a failing runner is disabled (see `runner_admin.rs`).
    pub disable: DisableRule,
    /// How often a replica looks for due deliveries when nothing announced one.
    pub poll: Duration,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        Self {
            egress: EgressPolicy::default(),
            schedule: RetrySchedule::default(),
            connect_timeout: Duration::from_secs(3),
            total_timeout: Duration::from_secs(10),
            concurrency: 32,
            per_pool: 8,
            per_organisation: 16,
            breaker: BreakerSettings::default(),
            disable: DisableRule::default(),
            poll: Duration::from_secs(1),
        }
    }
}

/// A lease outlasts the attempt's total timeout by this much, so it never ends while the
/// attempt can still answer.
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// Due deliveries read per lease, per free slot: some of them may be over a cap.
const READ_PER_SLOT: u32 = 2;

/// What kind of failure ended an attempt. Events, which anyone with `activity:read` reads,
/// carry only this: the detail (a TLS alert or a protocol error) can fingerprint whatever
/// listens at a runner's URL, an internal service included, so it stays in the attempt's
/// record, shown by `cpctl deliveries show`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureCategory {
    /// The connect or the whole attempt ran past its timeout.
    Timeout,
    /// No connection: refused, unreachable, or a name that does not resolve.
    Connect,
    /// Connected, but the TLS handshake failed (or something other than TLS answered).
    Tls,
    /// The runner answered with a status other than 2xx.
    Status,
    /// Not sent: the URL is invalid or the egress rule refuses it.
    Refused,
    /// Connected, but the exchange failed otherwise (a reset, a malformed answer).
    Request,
}

impl FailureCategory {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connect => "connect",
            Self::Tls => "tls",
            Self::Status => "status",
            Self::Refused => "refused",
            Self::Request => "request",
        }
    }
}

/// Why an attempt failed: coarsely, for events, and in detail, for its record.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptFailure {
    pub category: FailureCategory,
    pub detail: String,
}

/// How an attempt ended, as the sender saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptAnswer {
    pub status_code: Option<u16>,
    /// From the request's start to the response's headers (or the failure).
    pub latency: Duration,
    /// `None` exactly when the status is 2xx.
    pub failure: Option<AttemptFailure>,
}

impl AttemptAnswer {
    pub fn from_status(status: u16, latency: Duration) -> Self {
        let detail = match status {
            200..=299 => None,
            300..=399 => Some(format!("HTTP {status}: redirects are not followed")),
            _ => Some(format!("HTTP {status}")),
        };
        Self {
            status_code: Some(status),
            latency,
            failure: detail.map(|detail| AttemptFailure {
                category: FailureCategory::Status,
                detail,
            }),
        }
    }

    pub fn failed(category: FailureCategory, detail: String, latency: Duration) -> Self {
        Self {
            status_code: None,
            latency,
            failure: Some(AttemptFailure { category, detail }),
        }
    }
}

fn chrono_of(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

impl Services {
    pub(super) fn delivery_url(&self, raw: &str) -> Result<DeliveryUrl, ServiceError> {
        let invalid =
            |m: String| ServiceError::from(ValidationErrors::from(FieldError::new("url", m)));
        let url = DeliveryUrl::parse(raw).map_err(invalid)?;
        self.settings
            .deliveries
            .egress
            .permits(&url)
            .map_err(invalid)?;
        Ok(url)
    }

    /// Sets (or with `None` clears) where a runner receives commands (`cpctl runners update`).
    pub async fn set_runner_url(
        &self,
        runner_id: Uuid,
        url: Option<&str>,
        write: &WriteContext,
    ) -> Result<Runner, ServiceError> {
        let url = url.map(|u| self.delivery_url(u)).transpose()?;
        let (runner, _, workspace) = self.runner_with_owners(runner_id).await?;
        let data = json!({ "deliveryOrigin": url.as_ref().map(|u| u.origin()) });
        let event = runner_event(
            &workspace,
            "runner.delivery_url_set",
            runner_id,
            write,
            data,
        );
        let url = url.map(|u| u.to_string());
        if !self
            .store
            .set_runner_url(write, runner_id, url.as_deref(), Self::now(), &event)
            .await?
        {
            return Err(ServiceError::not_found("no such runner"));
        }
        Ok(Runner {
            delivery_url: url,
            ..runner
        })
    }

    /// A delivery with its attempts (`cpctl deliveries show`).
    pub async fn delivery_report(&self, delivery_id: Uuid) -> Result<DeliveryReport, ServiceError> {
        self.store
            .delivery_report(delivery_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such delivery"))
    }

    /// Due deliveries to lease next, organisations and their pools taking turns, none of
    /// `skip_pools` and `skip_organisations` (at their cap), up to `free` × 2.
    pub async fn due_deliveries(
        &self,
        free: u32,
        skip_pools: &[Uuid],
        skip_organisations: &[Uuid],
    ) -> Result<Vec<DueDelivery>, ServiceError> {
        let now = Self::now();
        if !self.store.any_due(now).await? {
            return Ok(Vec::new());
        }
        let cap = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let settings = &self.settings.deliveries;
        let query = DueQuery {
            now,
            per_pool: cap(settings.per_pool),
            per_organisation: cap(settings.per_organisation),
            skip_pools,
            skip_organisations,
            limit: free.saturating_mul(READ_PER_SLOT),
        };
        Ok(self.store.due_deliveries(&query).await?)
    }

    /// Leases those of `deliveries` still due to this process.
    pub async fn lease_deliveries(&self, deliveries: &[Uuid]) -> Result<Leased, ServiceError> {
        let now = Self::now();
        let total = self.settings.deliveries.total_timeout + LEASE_MARGIN;
        let leased = self
            .store
            .lease_attempts(
                &WriteContext::system(),
                now,
                deliveries,
                now + chrono_of(total),
            )
            .await?;
        Ok(leased)
    }

    /// Records how an attempt ended and decides what follows: nothing after a 2xx, the next
    /// attempt on the schedule, or, after the last, the delivery and its command `failed` with
    /// a `webhook_delivery.failed` event (actor `system`).
    pub async fn finish_delivery_attempt(
        &self,
        attempt: &LeasedAttempt,
        answer: AttemptAnswer,
    ) -> Result<AttemptRecorded, ServiceError> {
        let now = Self::now();
        let write = WriteContext::system();
        let breaker = self.settings.deliveries.breaker.step(&answer, now);
        let schedule = &self.settings.deliveries.schedule;
        let next_number = usize::try_from(attempt.number).unwrap_or(usize::MAX) + 1;
        let category = answer.failure.as_ref().map(|f| f.category);
        let next = match (category, schedule.wait_before(next_number)) {
            (None, _) => AttemptNext::Delivered,
            (Some(_), Some(wait)) => AttemptNext::RetryAt(now + chrono_of(wait)),
            (Some(category), None) => {
                let category = category.as_str();
                let detail = format!(
                    "delivery failed after {} attempts; the last: {category} (details: cpctl deliveries show)",
                    attempt.number
                );
                let to = DeliveryStatus::Failed;
                AttemptNext::GiveUp {
                    command_id: attempt.command_id,
                    command_from: attempt.command_status,
                    delivery_from: DeliveryStatus::Pending,
                    detail,
                    event: Box::new(NewAuditEvent {
                        organisation_id: attempt.organisation_id,
                        workspace_id: Some(attempt.workspace_id),
                        event_type: "webhook_delivery.failed",
                        actor: write.actor(),
                        target_kind: "webhook_delivery",
                        target_id: attempt.delivery_id,
                        correlation_id: write.correlation_id().to_string(),
                        occurred_at: now,
                        data: json!({
                            "commandId": attempt.command_id,
                            "poolId": attempt.pool_id,
                            "runnerId": attempt.runner_id,
                            "attempts": attempt.number,
                            "lastErrorCategory": category,
                            "from": DeliveryStatus::Pending.as_str(),
                            "to": to.as_str(),
                            "commandFrom": attempt.command_status.as_str(),
                            "commandTo": to.command_status().as_str(),
                            "reason": "delivery attempts exhausted",
                        }),
                    }),
                }
            }
        };
        let result = AttemptResult {
            delivery_id: attempt.delivery_id,
            number: attempt.number,
            runner_id: attempt.runner_id,
            finished_at: now,
            status_code: answer.status_code.map(i32::from),
            latency_ms: i32::try_from(answer.latency.as_millis()).unwrap_or(i32::MAX),
            error: answer.failure.map(|f| f.detail),
            breaker,
            next,
        };
        let failed = result.error.is_some();
        let recorded = self.store.finish_attempt(&write, &result).await?;
        // The attempt is recorded whatever this says: a failure here is logged, not returned
        // (the dispatcher would take it for an unrecorded attempt); the next failure asks again.
        if failed && let Err(e) = self.apply_disable_rule(attempt).await {
            tracing::warn!(runner_id = %attempt.runner_id, error = %e, "could not apply the runner disable rule");
        }
        Ok(recorded)
    }
}

/// The body of one delivery: the command and the delivery id a runner reports on.
pub fn dispatch_body(attempt: &LeasedAttempt) -> DispatchPayload {
    DispatchPayload {
        event_type: DISPATCH_EVENT_TYPE.to_owned(),
        timestamp: Timestamp::new(attempt.started_at),
        data: DispatchData {
            delivery_id: attempt.delivery_id,
            command_id: attempt.command_id,
            workspace_id: attempt.workspace_id,
            pool_id: attempt.pool_id,
            runner_id: attempt.runner_id,
            command: attempt.command.clone(),
            args: attempt.args.clone(),
            environment_id: attempt.environment_id,
            timeout_seconds: attempt.timeout_seconds,
            deadline_at: Timestamp::new(attempt.deadline_at),
            attempt: u32::try_from(attempt.number).unwrap_or_default(),
        },
    }
}
