//! The dispatcher: sends leased delivery attempts from this process, each outside any
//! transaction, within the slot caps of `fair_share` (per process, pool and organisation),
//! and never to a link-local address whatever a runner's host name resolves to.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{Notify, Semaphore};

use super::deliveries::{AttemptAnswer, DeliverySettings, FailureCategory, dispatch_body};
use super::fair_share::InFlight;
use super::{BackgroundTask, ServiceError, Services};
use crate::domain::{
    DeliveryUrl, WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER,
};
use crate::storage::LeasedAttempt;

/// Response bodies are read up to this many bytes (to reuse the connection), then dropped.
const MAX_RESPONSE_BYTES: usize = 4096;
/// Deliveries leased per statement.
const LEASE_BATCH: u32 = 32;

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
        let started = chrono::Utc::now();
        let passes = self.services.background_passes();
        let (skip_pools, skip_organisations) = self.in_flight().full();
        let due = self
            .services
            .due_deliveries(free as u32, &skip_pools, &skip_organisations)
            .await?;
        // One leaser per process: nothing starts between this pick and the lease.
        let picked = self.in_flight().pick(&due, free);
        if picked.is_empty() {
            passes.completed(BackgroundTask::Deliveries, started);
            return Ok(0);
        }
        let leased = self.services.lease_deliveries(&picked).await?;
        // Recorded once the lease committed: every attempt it started has its row by now.
        passes.completed(BackgroundTask::Deliveries, started);
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
        let msg_id = attempt.webhook_id.to_string();
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
