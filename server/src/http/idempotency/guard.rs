//! Claiming, storing and replaying a keyed request's record.
//!
//! ## The stored-bytes quota
//!
//! Every stored record costs fast-state memory for 24 hours, and a caller chooses how many keys
//! it sends and how large the responses are (a runner command echoing its arguments is ~260
//! KB). So each owner has a quota of stored bytes (`--idempotency-quota-bytes`, 64 MiB by
//! default) per 24-hour window. The owner is the user for a bearer token (a user's tokens
//! share one quota, as they share the user's rate budget), or the runner for a signed report.
//! The window opens with the first byte counted and the count starts again when it ends, so
//! an owner's live records never exceed about twice the quota.
//!
//! Over the quota, a keyed request is **refused before it runs**: 429
//! `idempotency_quota_exceeded`, with `retry-after` (the seconds left in the window) and
//! `details.quotaBytes`. The alternative, running it without storing the response (answered
//! with a header), was rejected: a client sends a key precisely because it may not see the
//! answer (a timeout, a dropped connection), and a header it never received cannot tell it
//! that its retry will run the operation a second time. A refusal changes nothing, is seen
//! before any effect, and leaves the choice to the client: wait, or resend without a key.
//! Replays are still answered over the quota (they store nothing). The check is made when the
//! key is claimed, before the handler runs; the response's size is known only after it, so
//! the response that crosses the quota is still stored (keeping its promise), and the quota
//! is exceeded by at most the responses in flight at that moment. Checking costs a keyed
//! request one more fast-state round trip at its claim, and counting one more after a 2xx is
//! stored; requests without a key pay nothing. What is counted is the sealed record and its
//! key, close to what Redis holds.
//!
//! ## The committed outcome
//!
//! The fast state (Redis, or the SQLite file, or the process) holds the claim and the quick
//! replay, but it is not where the change is: a crash between the change's commit and the
//! stored response, a Redis restart, or a failed store would leave a key that runs again. So
//! the sealed response is also committed **in the change's own transaction**, in the records
//! store's `idempotency_outcomes` (the handler's [`WriteContext`] parks its transaction while
//! the response is rendered; a 2xx that wrote nothing commits its outcome alone). Then:
//! - a claim the fast state grants (no record, or a lease that ended) first looks for a
//!   committed outcome under the same place: found, it is replayed and copied back to the fast
//!   state; another fingerprint is `idempotency_key_reused`; the records store down is a 503,
//!   never a run;
//! - the outcome's primary key makes a second change under a live key fail and roll back,
//!   whatever the timing (a commit landing after its lease ended included); that attempt
//!   answers with the committed outcome. When the second change fails first on the first's
//!   change instead (a 4xx: the token name it took, the grant it revoked), the committed
//!   outcome is looked up too, and answered when there is one;
//! - a commit that fails or outlives the rest of the lease answers 503 and keeps the claim: its
//!   outcome is unknown until the lease ends, and the retry after it finds the outcome if the
//!   commit landed;
//! - storing in the fast state can still fail after the commit: the key is held until the lease
//!   ends and then answered from the records store, never freed for a second run.
//!
//! This is the shape of Stripe's idempotency keys in Postgres (the key's row in the database of
//! the change, written in the change's transaction; 409 while a request holds the key). What
//! is not taken: their multi-phase recovery points (every v1 operation is one transaction, so
//! one atomic phase suffices) and the key row as the in-flight lock (the claim stays in the fast
//! state, so a retry storm never queues on a records-store row). Cost: a keyed request's first
//! attempt reads the records store once at its claim and writes one row in its transaction;
//! requests without a key pay nothing.
//!
//! [`WriteContext`]: crate::storage::WriteContext

use std::sync::Arc;
use std::time::Duration;

use poem::Response;
use poem::http::StatusCode;

use super::input::ReplayGate;
use super::record::{IdempotentRequest, decode, encode};
use crate::domain::{IdempotencyKey, RecordCipher};
use crate::http::error::ApiFailure;
use crate::storage::{
    Claim, FastStateError, HeldKey, IdempotencyStore, OutcomeRecord, OutcomeSlot, OutcomeStore,
    StoreError,
};

pub struct IdempotencyGuard {
    store: Arc<dyn IdempotencyStore>,
    /// The records store, where each keyed change commits its outcome.
    outcomes: Arc<dyn OutcomeStore>,
    cipher: RecordCipher,
    prefix: String,
    /// How long a claim holds its key while its handler runs; the handler's deadline is
    /// shorter (see [`handler_deadline`](Self::handler_deadline)).
    lease: Duration,
    ttl: Duration,
    /// Stored bytes per owner per window; `None`: no quota.
    quota: Option<u64>,
}

/// A claim held while the handler runs.
pub(super) struct Held {
    place: String,
    owner: String,
    fingerprint: String,
    /// The quota key the stored response counts against, when there is a quota.
    quota_key: Option<String>,
}

impl Held {
    fn key(&self) -> HeldKey<'_> {
        HeldKey {
            key: &self.place,
            owner: &self.owner,
            fingerprint: &self.fingerprint,
        }
    }
}

pub(super) enum Claimed {
    Run(Held),
    Replay(Response),
}

impl IdempotencyGuard {
    pub fn new(
        store: Arc<dyn IdempotencyStore>,
        outcomes: Arc<dyn OutcomeStore>,
        cipher: RecordCipher,
        prefix: String,
        quota: Option<u64>,
        lease: Duration,
    ) -> Self {
        Self {
            store,
            outcomes,
            cipher,
            prefix,
            lease,
            ttl: Duration::from_secs(24 * 3600),
            quota,
        }
    }

    /// The same guard with another lease (the policy install's).
    pub fn with_lease(&self, lease: Duration) -> Self {
        Self {
            store: self.store.clone(),
            outcomes: self.outcomes.clone(),
            cipher: self.cipher.clone(),
            prefix: self.prefix.clone(),
            lease,
            ttl: self.ttl,
            quota: self.quota,
        }
    }

    /// Refuses a claimed key whose owner's quota is spent, freeing the key again.
    pub(super) async fn check_quota(&self, held: &Held) -> Result<(), poem::Error> {
        let (Some(quota), Some(quota_key)) = (self.quota, &held.quota_key) else {
            return Ok(());
        };
        let used = self.store.stored_bytes(quota_key).await;
        let refusal = match used {
            Ok((used, _)) if used < quota => return Ok(()),
            Ok((_, left)) => {
                let failure = ApiFailure::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "idempotency_quota_exceeded",
                    "the quota of stored idempotent responses is spent; retry later, or send the request without an Idempotency-Key",
                )
                .with_details(serde_json::json!({ "quotaBytes": quota }))
                .with_retry_after(left);
                poem::Error::from(failure)
            }
            Err(_) => ApiFailure::from(crate::service::ServiceError::Unavailable).into(),
        };
        self.release(held).await;
        Err(refusal)
    }

    /// A keyed handler must have finished two thirds into its lease: past that it is stopped
    /// (its transaction rolls back unless it was committing), and the key stays claimed until
    /// the lease ends, so no retry runs while the first attempt's outcome may still land.
    pub(super) fn lease(&self) -> Duration {
        self.lease
    }

    pub(super) fn handler_deadline(&self) -> Duration {
        self.lease * 2 / 3
    }

    /// How long a handler's change may take to commit: the rest of the lease, so the commit
    /// settles before a retry may claim the key.
    fn commit_deadline(&self) -> Duration {
        self.lease.saturating_sub(self.handler_deadline())
    }

    /// Claims `key` for `request`: run the handler, replay the stored response, or a 409.
    pub(super) async fn claim(
        &self,
        key: &IdempotencyKey,
        request: IdempotentRequest<'_>,
    ) -> Result<Claimed, ApiFailure> {
        let place = request.record_key(&self.prefix, key);
        let fingerprint = request.fingerprint();
        let quota_key = self
            .quota
            .and(request.quota_owner.as_deref())
            .map(|owner| crate::storage::keys::idempotency_quota(&self.prefix, owner));
        let unavailable = |_| ApiFailure::from(crate::service::ServiceError::Unavailable);

        let mut claim = self
            .store
            .claim(&place, &fingerprint, self.lease)
            .await
            .map_err(unavailable)?;
        if let Claim::Done {
            fingerprint: stored,
            record,
        } = &claim
            && *stored == fingerprint
            && let Err(e) = self.cipher.open(record, place.as_bytes())
        {
            tracing::warn!(error = %e, "idempotency record cannot be decrypted; treating it as absent");
            self.store.discard(&place).await.map_err(unavailable)?;
            claim = self
                .store
                .claim(&place, &fingerprint, self.lease)
                .await
                .map_err(unavailable)?;
        }
        match claim {
            Claim::Done {
                fingerprint: stored,
                ..
            }
            | Claim::InFlight {
                fingerprint: stored,
            } if stored != fingerprint => Err(key_reused()),
            Claim::InFlight { .. } => Err(in_progress()),
            Claim::Done { record, .. } => {
                let plain = self
                    .cipher
                    .open(&record, place.as_bytes())
                    .map_err(|_| ApiFailure::internal())?;
                tracing::info!("idempotent replay");
                decode(&plain)
                    .map(Claimed::Replay)
                    .ok_or_else(ApiFailure::internal)
            }
            Claim::Acquired { owner } => {
                let held = Held {
                    place,
                    owner,
                    fingerprint,
                    quota_key,
                };
                // The fast state knows of no outcome, but it may have lost one (a restart, a
                // crash between commit and completion, a lease that ended): the records store
                // decides before anything runs.
                match self.committed(&held).await {
                    Ok(None) => Ok(Claimed::Run(held)),
                    Ok(Some(replay)) => Ok(Claimed::Replay(replay)),
                    Err(failure) => {
                        self.release(&held).await;
                        Err(failure)
                    }
                }
            }
        }
    }

    /// The response committed under the held claim's place by an earlier attempt, copied back
    /// into the fast state (so the next retry replays from there) and answered as a replay.
    async fn committed(&self, held: &Held) -> Result<Option<Response>, ApiFailure> {
        let stored = self
            .outcomes
            .find_outcome(&held.place, now_ms())
            .await
            .map_err(|_| ApiFailure::from(crate::service::ServiceError::Unavailable))?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        if stored.fingerprint != held.fingerprint {
            return Err(key_reused());
        }
        let plain = self
            .cipher
            .open(&stored.sealed, held.place.as_bytes())
            .map_err(|e| {
                tracing::error!(error = %e, "a committed idempotent outcome cannot be decrypted");
                ApiFailure::internal()
            })?;
        let replay = decode(&plain).ok_or_else(ApiFailure::internal)?;
        if let Err(e) = self.complete(held, &stored.sealed).await {
            // The records store still answers the next retry.
            tracing::warn!(error = %e, "could not copy a committed outcome to the fast state");
        }
        tracing::info!("idempotent replay of a committed outcome");
        Ok(Some(replay))
    }

    /// Stores the sealed response under the held claim in the fast state.
    async fn complete(&self, held: &Held, sealed: &[u8]) -> Result<(), FastStateError> {
        self.store.complete(held.key(), sealed, self.ttl).await
    }

    async fn release(&self, held: &Held) {
        if let Err(e) = self.store.release(held.key()).await {
            tracing::warn!(error = %e, "could not release an idempotency claim; its lease will");
        }
    }

    /// An outcome found under the held claim after its handler ran, answered only when `gate`
    /// (the request's permission) still allows it, as every replay is: refused, the answer a
    /// fresh request would get. The record stays either way (`committed` stored it).
    async fn late_replay(
        gate: Option<&ReplayGate>,
        replay: Response,
    ) -> Result<Response, poem::Error> {
        if let Some(gate) = gate {
            gate.allows().await?;
        }
        Ok(replay)
    }

    /// Commits a 2xx's outcome with its change, then stores it in the fast state; frees the key
    /// for anything else.
    pub(super) async fn finish(
        &self,
        held: Held,
        gate: Option<&ReplayGate>,
        outcome: poem::Result<Response>,
        slot: &OutcomeSlot,
    ) -> poem::Result<Response> {
        let response = match outcome {
            Ok(response) if response.status().is_success() => response,
            other => {
                // A failure changed nothing the key must remember. A store call that did commit
                // before the handler failed keeps its change, as without a key. Bounded as the
                // success's commit below: a store that stopped answering must not turn this
                // answer (often a 503) into a hang.
                if let Some(change) = slot.take() {
                    let committing = change.commit(None, now_ms());
                    match tokio::time::timeout(self.commit_deadline(), committing).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::error!(error = %e, "could not commit the change of a failed keyed request")
                        }
                        Err(_) => {
                            // It may yet land: the key stays claimed until the lease ends.
                            tracing::error!(
                                "the change of a failed keyed request did not commit in time"
                            );
                            return other;
                        }
                    }
                }
                // An earlier attempt whose commit landed after its lease ended makes this one
                // fail on its change (the name it created taken, the grant it revoked gone):
                // then the client gets that attempt's outcome, not the trace it left, if it may
                // still perform the request (a 403 because its grant was just revoked must not
                // become that attempt's secret).
                let status = match &other {
                    Ok(response) => response.status(),
                    Err(e) => e.status(),
                };
                if status.is_client_error() {
                    #[cfg(debug_assertions)]
                    fault_pause_before_late_outcome().await;
                    if let Ok(Some(replay)) = self.committed(&held).await {
                        // `committed` completed the claim with that outcome: nothing to release.
                        return Self::late_replay(gate, replay).await;
                    }
                }
                self.release(&held).await;
                return other;
            }
        };
        let (response, plain) = encode(response).await;
        if fault_forget_outcomes() {
            if let Some(change) = slot.take() {
                let _ = change.commit(None, now_ms()).await;
            }
            self.release(&held).await;
            return Ok(response);
        }
        let sealed = self.cipher.seal(&plain, held.place.as_bytes());
        let record = OutcomeRecord {
            place: held.place.clone(),
            fingerprint: held.fingerprint.clone(),
            sealed,
            expires_at_ms: now_ms().saturating_add(self.ttl.as_millis() as i64),
        };
        let committing = async {
            match slot.take() {
                Some(change) => change.commit(Some(&record), now_ms()).await,
                // A 2xx that changed nothing still answers every retry the same way.
                None => self.outcomes.put_outcome(&record, now_ms()).await,
            }
        };
        let wait = self.commit_deadline();
        match tokio::time::timeout(wait, committing).await {
            Ok(Ok(())) => {}
            Ok(Err(StoreError::Conflict(_))) => {
                // Another attempt's outcome was committed first: this change rolled back, and
                // the client gets the one that counts.
                return match self.committed(&held).await {
                    Ok(Some(replay)) => Self::late_replay(gate, replay).await,
                    Ok(None) => Err(in_progress().into()),
                    Err(failure) => Err(failure.into()),
                };
            }
            Ok(Err(_)) | Err(_) => {
                // The commit may or may not have landed: the key stays claimed until the lease
                // ends, and the retry after it finds the outcome if it did.
                tracing::error!(
                    "the commit of a keyed request failed or timed out; its outcome is unknown"
                );
                return Err(ApiFailure::from(crate::service::ServiceError::Unavailable)
                    .with_retry_after(wait)
                    .into());
            }
        }
        #[cfg(debug_assertions)]
        fault_after_commit();
        if let Err(e) = self.complete(&held, &record.sealed).await {
            // The outcome is committed: once the lease ends, a retry replays it from there.
            tracing::error!(error = %e, "could not store the idempotent response in the fast state");
        } else if let Some(quota_key) = &held.quota_key {
            let bytes = (record.sealed.len() + held.place.len()) as u64;
            if let Err(e) = self.store.count_stored(quota_key, bytes, self.ttl).await {
                // Stored but not counted: the quota undercounts by one response.
                tracing::warn!(error = %e, "could not count a stored idempotent response");
            }
        }
        Ok(response)
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn key_reused() -> ApiFailure {
    ApiFailure::new(
        StatusCode::CONFLICT,
        "idempotency_key_reused",
        "this Idempotency-Key was used with a different request",
    )
}

fn in_progress() -> ApiFailure {
    ApiFailure::new(
        StatusCode::CONFLICT,
        "idempotency_in_progress",
        "a request with this Idempotency-Key is still running; retry later",
    )
    .with_retry_after(Duration::from_secs(1))
}

/// A test's fault hook, never in release builds: with `CP_FAULT_ABORT_AFTER_OUTCOME_COMMIT`
/// set, the process dies right after a keyed request's outcome is committed, before the fast
/// state hears of it: the crash this module's records store guards against.
#[cfg(debug_assertions)]
fn fault_after_commit() {
    if std::env::var_os("CP_FAULT_ABORT_AFTER_OUTCOME_COMMIT").is_some() {
        std::process::abort();
    }
}

/// A test's fault hook, never in release builds: with `CP_FAULT_PAUSE_BEFORE_LATE_OUTCOME_MS`
/// set, a keyed request that ended in a 4xx waits that many milliseconds before it looks for an
/// outcome committed under its key meanwhile: the moment a late commit lands, held open.
#[cfg(debug_assertions)]
async fn fault_pause_before_late_outcome() {
    let pause = std::env::var("CP_FAULT_PAUSE_BEFORE_LATE_OUTCOME_MS")
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok());
    if let Some(ms) = pause {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// A drill's fault switch, never in release builds: with `CP_FAULT_FORGET_OUTCOMES` set, a keyed
/// request's change commits without its outcome and its claim is released, so a retry runs the
/// change again. The crash drill must fail against such a server (RELIABILITY.md).
#[cfg(debug_assertions)]
fn fault_forget_outcomes() -> bool {
    std::env::var_os("CP_FAULT_FORGET_OUTCOMES").is_some()
}

#[cfg(not(debug_assertions))]
const fn fault_forget_outcomes() -> bool {
    false
}
