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

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use uuid::Uuid;

use super::admin::admin_event;
use super::fair_share::{BreakerSettings, InFlight};
use super::{ServiceError, Services};
use crate::domain::{
    CorrelationId, DISPATCH_EVENT_TYPE, DeliveryStatus, DeliveryUrl, DispatchData, DispatchPayload,
    EgressPolicy, FieldError, NewAuditEvent, RetrySchedule, Timestamp, ValidationErrors,
    WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER,
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
            poll: Duration::from_secs(1),
        }
    }
}

/// A lease outlasts the attempt's total timeout by this much, so it never ends while the
/// attempt can still answer.
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// Response bodies are read up to this many bytes (to reuse the connection), then dropped.
const MAX_RESPONSE_BYTES: usize = 4096;
/// Deliveries leased per statement.
const LEASE_BATCH: u32 = 32;
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
        cid: &CorrelationId,
    ) -> Result<Runner, ServiceError> {
        let url = url.map(|u| self.delivery_url(u)).transpose()?;
        let (runner, pool, workspace) = self.runner_with_owners(runner_id).await?;
        let event = admin_event(
            workspace.organisation_id,
            Some(pool.workspace_id),
            "runner.delivery_url_set",
            "runner",
            runner_id,
            cid,
            json!({ "deliveryOrigin": url.as_ref().map(|u| u.origin()) }),
        );
        let url = url.map(|u| u.to_string());
        if !self
            .store
            .set_runner_url(
                &WriteContext::admin(cid),
                runner_id,
                url.as_deref(),
                Self::now(),
                &event,
            )
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
                    event: NewAuditEvent {
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
                    },
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
        Ok(self.store.finish_attempt(&write, &result).await?)
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

/// Sends leased attempts from this process: at most `concurrency` at once, of them at most
/// `per_pool` to one pool and `per_organisation` to one organisation, each outside any
/// transaction.
pub struct Dispatcher {
    services: Arc<Services>,
    client: reqwest::Client,
    slots: Arc<Semaphore>,
    in_flight: Mutex<InFlight>,
    freed: Arc<Notify>,
}

impl Dispatcher {
    pub fn new(services: Arc<Services>) -> Result<Arc<Self>, ServiceError> {
        let settings = &services.settings.deliveries;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.total_timeout)
            .user_agent(concat!("control-plane/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(Arc::new(NoLinkLocal))
            .build()
            .map_err(|e| {
                ServiceError::Internal(format!("cannot build the delivery client: {e}"))
            })?;
        let slots = Arc::new(Semaphore::new(settings.concurrency));
        let in_flight = Mutex::new(InFlight::new(settings.per_pool, settings.per_organisation));
        Ok(Arc::new(Self {
            services,
            client,
            slots,
            in_flight,
            freed: Arc::new(Notify::new()),
        }))
    }

    /// Runs until the process ends: looks for due deliveries when audit events are announced
    /// (a submission writes one; on Postgres any replica's), when an attempt of this process
    /// ends, and at least every `poll`.
    pub fn spawn(self: Arc<Self>) {
        if self.services.settings.deliveries.concurrency == 0 {
            tracing::info!("--delivery-concurrency 0: this replica sends no webhook deliveries");
            return;
        }
        tokio::spawn(async move {
            // The audit feed's announcements, not a listener of our own: on Postgres each
            // listener holds a connection for good.
            let mut announced = self.services.audit_feed().announced();
            let poll = self.services.settings.deliveries.poll;
            loop {
                match self.dispatch_once().await {
                    Ok(n) if n > 0 => continue,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "could not lease webhook deliveries; retrying");
                    }
                }
                tokio::select! {
                    _ = announced.changed() => {}
                    () = self.freed.notified() => {}
                    () = tokio::time::sleep(poll) => {}
                }
                // A burst of announcements is one look.
                announced.mark_unchanged();
            }
        });
    }

    /// Leases as many due deliveries as there are free slots and the caps leave room for, and
    /// starts sending them; returns how many due deliveries it handled (sent or set waiting
    /// for a runner).
    pub async fn dispatch_once(self: &Arc<Self>) -> Result<usize, ServiceError> {
        let free = self.slots.available_permits().min(LEASE_BATCH as usize);
        if free == 0 {
            return Ok(0);
        }
        let (skip_pools, skip_organisations) = self.in_flight().full();
        let due = self
            .services
            .due_deliveries(free as u32, &skip_pools, &skip_organisations)
            .await?;
        // One leaser per process: nothing starts between this pick and the lease.
        let picked = self.in_flight().pick(&due, free);
        if picked.is_empty() {
            return Ok(0);
        }
        let leased = self.services.lease_deliveries(&picked).await?;
        // Deliveries set waiting count too: a full batch means more may be due.
        let looked = leased.attempts.len() + leased.waiting as usize;
        for attempt in leased.attempts {
            let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                // Cannot happen (one leaser per process); the lease ends and another takes it.
                break;
            };
            self.in_flight()
                .start(attempt.organisation_id, attempt.pool_id);
            let this = self.clone();
            tokio::spawn(async move {
                let answer = this.send(&attempt).await;
                if let Some(failure) = &answer.failure {
                    tracing::info!(
                        delivery_id = %attempt.delivery_id,
                        runner_id = %attempt.runner_id,
                        attempt = attempt.number,
                        error = %failure.detail,
                        "webhook delivery attempt failed"
                    );
                }
                if let Err(e) = this
                    .services
                    .finish_delivery_attempt(&attempt, answer)
                    .await
                {
                    // The lease ends and the delivery is sent again, with the same webhook-id.
                    tracing::warn!(
                        delivery_id = %attempt.delivery_id,
                        error = %e,
                        "could not record a webhook delivery attempt; it will be sent again"
                    );
                }
                this.in_flight()
                    .end(attempt.organisation_id, attempt.pool_id);
                drop(slot);
                this.freed.notify_one();
            });
        }
        Ok(looked)
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, InFlight> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One attempt: the egress rule, then a signed POST; never follows a redirect, never reads
    /// more than a few KiB of the answer.
    async fn send(&self, attempt: &LeasedAttempt) -> AttemptAnswer {
        let started = Instant::now();
        let refused = |category, e: String| AttemptAnswer::failed(category, e, started.elapsed());
        let url = match DeliveryUrl::parse(&attempt.url) {
            Ok(url) => url,
            Err(e) => {
                return refused(
                    FailureCategory::Refused,
                    format!("the runner's delivery URL {e}"),
                );
            }
        };
        if let Err(e) = self.services.settings.deliveries.egress.permits(&url) {
            return refused(
                FailureCategory::Refused,
                format!("egress refused: the delivery URL {e}"),
            );
        }
        let secrets = match self.services.signing_secrets(attempt.runner_id).await {
            Ok(secrets) => secrets,
            Err(e) => {
                return refused(
                    FailureCategory::Request,
                    format!("the runner's webhook secret could not be read: {e}"),
                );
            }
        };
        let body = serde_json::to_string(&dispatch_body(attempt)).unwrap_or_default();
        let msg_id = attempt.delivery_id.to_string();
        let timestamp = chrono::Utc::now().timestamp();
        let signature =
            self.services
                .webhook_signer()
                .sign(&msg_id, timestamp, body.as_bytes(), &secrets);
        let response = self
            .client
            .post(url.as_str())
            .header("content-type", "application/json")
            .header(WEBHOOK_ID_HEADER, &msg_id)
            .header(WEBHOOK_TIMESTAMP_HEADER, timestamp.to_string())
            .header(WEBHOOK_SIGNATURE_HEADER, signature)
            .body(body)
            .send()
            .await;
        let mut response = match response {
            Ok(r) => r,
            Err(e) => {
                let (category, detail) = describe(&e, &self.services.settings.deliveries);
                return refused(category, detail);
            }
        };
        let latency = started.elapsed();
        let mut read = 0;
        while read < MAX_RESPONSE_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                _ => break,
            }
        }
        AttemptAnswer::from_status(response.status().as_u16(), latency)
    }
}

/// Resolves runner host names as the system does, less link-local addresses: a name may be
/// registered pointing anywhere and later resolve to 169.254.169.254, so the egress rule is
/// checked again on every address the attempt could connect to. A name left with no address
/// fails the attempt (`connect`), naming the rule.
struct NoLinkLocal;

impl reqwest::dns::Resolve for NoLinkLocal {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let allowed = reachable(found);
            if allowed.is_empty() {
                return Err(crate::domain::LINK_LOCAL_REFUSED.into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The addresses an attempt may connect to: all but the link-local ones.
fn reachable(addrs: impl Iterator<Item = std::net::SocketAddr>) -> Vec<std::net::SocketAddr> {
    addrs
        .filter(|a| !crate::domain::is_link_local(a.ip()))
        .collect()
}

/// What went wrong, coarsely and in detail, without the URL (its path or query may carry the
/// runner's secret).
fn describe(e: &reqwest::Error, settings: &DeliverySettings) -> (FailureCategory, String) {
    if e.is_timeout() {
        let detail = format!(
            "timed out (connect {} ms, total {} ms)",
            settings.connect_timeout.as_millis(),
            settings.total_timeout.as_millis()
        );
        return (FailureCategory::Timeout, detail);
    }
    let mut detail = String::new();
    let mut tls = false;
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        detail = s.to_string();
        // rustls names itself in its errors' types; its messages speak of certificates,
        // handshakes and message types ("received corrupt message of type InvalidContentType").
        let text = format!("{s} {s:?}").to_ascii_lowercase();
        tls |= ["tls", "certificate", "handshake", "corrupt message"]
            .iter()
            .any(|w| text.contains(w));
        source = s.source();
    }
    let (category, kind) = match (tls, e.is_connect()) {
        (true, _) => (FailureCategory::Tls, "TLS failed"),
        (false, true) => (FailureCategory::Connect, "could not connect"),
        (false, false) => (FailureCategory::Request, "request failed"),
    };
    let detail = if detail.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {detail}")
    };
    (category, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolved_link_local_addresses_are_never_connected_to() {
        let found = [
            "169.254.169.254:0",
            "10.0.0.7:0",
            "[fe80::1]:0",
            "[2001:db8::1]:0",
        ]
        .map(|a| a.parse::<std::net::SocketAddr>().unwrap());
        let kept: Vec<String> = reachable(found.into_iter())
            .iter()
            .map(|a| a.ip().to_string())
            .collect();
        assert_eq!(kept, ["10.0.0.7", "2001:db8::1"]);
    }
}
