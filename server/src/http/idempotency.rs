//! Exact replay of mutating requests under an `Idempotency-Key`.
//!
//! The record is keyed by principal, method, operation and key, and holds a fingerprint of the
//! request (method, path, canonical body). Only 2xx responses are stored: a 4xx or 5xx had no
//! effect, so the key stays free and a corrected retry runs. A 401 never reaches this point (it
//! has no principal). Stored responses are encrypted; a record that cannot be decrypted is
//! logged, discarded and treated as absent.
//!
//! Applied in one place, in two halves, so a handler holds only its own logic:
//! - [`Idempotency`] wraps the API. A mutating request that carries a key gets a [`Ticket`];
//!   once the route has answered, the ticket is finished: a 2xx is stored, anything else
//!   releases the key, and a replay is answered as stored.
//! - The [`Idempotent`] extractor claims the ticket. It wraps an operation's input (a
//!   bearer-authenticated [`JsonBody`], or a runner's [`Signed`] body), so the claim comes
//!   where the rule needs it: after the caller is authenticated and the path and body are
//!   accepted (and, for a runner, after its signature and its rate limit), before the handler
//!   runs. Claiming earlier, in the wrapper, would answer a replay or a 409 to a request that
//!   is refused with a 400 or 401; and a runner is known only once its signature over the
//!   body is verified.
//!
//! # A replay is an answer like any other
//!
//! A stored response (a child token's secret, say) is given only to a caller that may still
//! perform the operation. The key's record belongs to one token, and that token is
//! authenticated on every request; before a replay, the operation's authorization is asked
//! again through the service ([`Services::may_replay`]: the active policy, and an issuer's
//! current limits), from the input's [`Permitted`] description of the request. Refused, the
//! caller gets what a fresh request would get (a 403 or 404) and the record stays. A runner's
//! signed report needs nothing more: its signature was verified against its live keys first.
//!
//! Nothing of the record's place or fingerprint is written by a handler: the operation id comes
//! from the route poem matched, looked up in [`Operations`] (read once from the API's OpenAPI
//! metadata); method and path are the request's as sent; the principal is the input's
//! authenticated caller; the digest is the body's.
//!
//! # The stored-bytes quota
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
//! # The handler's deadline
//!
//! A claim's lease (30 s) frees the key of a request that died; a handler still running when
//! its lease ends would let a retry run beside it. So a keyed handler is stopped at two thirds
//! of the lease: its future is dropped (an open transaction rolls back), the answer is 503 with
//! the rest of the lease as `retry-after`, and the claim is left to its lease rather than
//! released, because a commit in flight at that instant may still land. Until the lease ends
//! a retry gets 409 `idempotency_in_progress` (with `retry-after: 1`).
//!
//! # The committed outcome
//!
//! The fast state (Redis, or the SQLite file, or the process) holds the claim and the quick
//! replay, but it is not where the change is: a crash between the change's commit and the
//! stored response, a Redis restart, or a failed store would leave a key that runs again. So
//! the sealed response is also committed **in the change's own transaction**, in the records
//! store's `idempotency_outcomes` (`storage/held.rs` holds the transaction open while the
//! handler's response is rendered; a 2xx that wrote nothing commits its outcome alone). Then:
//! - a claim the fast state grants (no record, or a lease that ended) first looks for a
//!   committed outcome under the same place: found, it is replayed and copied back to the fast
//!   state; another fingerprint is `idempotency_key_reused`; the records store down is a 503,
//!   never a run;
//! - the outcome's primary key makes a second change under a live key fail and roll back,
//!   whatever the timing (a commit landing after its lease ended included); that attempt
//!   answers with the committed outcome;
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
//! [`Signed`]: super::auth::Signed

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use poem::http::{HeaderValue, Method, StatusCode, header};
use poem::{Body, Endpoint, IntoResponse, PathPattern, Request, RequestBody, Response};
use poem_openapi::registry::{MetaApi, MetaParamIn, MetaRequest, MetaSchemaRef, Registry};
use poem_openapi::{ApiExtractor, ApiExtractorType, ExtractParamOptions, OperationId};
use sha2::{Digest, Sha256};

use super::auth::{AuthOutcome, token_subject};
use super::error::ApiFailure;
use super::payload::JsonBody;
use crate::domain::{IdempotencyKey, RecordCipher};
use crate::service::{Operation, Permission, Services};
use crate::storage::held::HeldCommits;
use crate::storage::{
    Claim, FastStateError, IdempotencyStore, OutcomeRecord, OutcomeStore, StoreError,
};

pub const REPLAYED_HEADER: &str = "idempotency-replayed";

/// The request's parsed `Idempotency-Key`, put in the request data by the middleware.
#[derive(Debug, Clone, Default)]
pub struct IdempotencyHeader(pub Option<IdempotencyKey>);

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
    operations: Operations,
}

/// Who asks and what: the record's place, and the fingerprint of the exact request.
struct IdempotentRequest<'a> {
    /// `tok:<token id>`, or `runner:<id>` for signed requests.
    principal: String,
    operation: &'a str,
    method: &'a str,
    /// As sent, without the query.
    path: &'a str,
    /// SHA-256 of the canonical body (empty for none).
    body_digest: [u8; 32],
    /// Whose quota a stored response counts against: `user:<id>` or `runner:<id>`.
    quota_owner: Option<String>,
}

impl IdempotentRequest<'_> {
    fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        for part in [
            self.method.as_bytes(),
            self.path.as_bytes(),
            &self.body_digest,
        ] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn record_key(&self, prefix: &str, key: &IdempotencyKey) -> String {
        crate::storage::keys::idempotency_record(
            prefix,
            &self.principal,
            self.method,
            self.operation,
            key.as_str(),
        )
    }
}

/// Operation ids by method and route, read once from the API's metadata: a route's id is
/// written only in its `#[oai(...)]`.
pub struct Operations(HashMap<(Method, String), &'static str>);

impl Operations {
    pub fn of(apis: Vec<MetaApi>) -> Self {
        let mut ids = HashMap::new();
        for path in apis.iter().flat_map(|api| &api.paths) {
            for operation in &path.operations {
                if let Some(id) = operation.operation_id {
                    ids.insert((operation.method.clone(), shape(&path.path)), id);
                }
            }
        }
        Self(ids)
    }

    /// The operation of a route, by poem's pattern of it (`/v1/a/:param0`).
    fn find(&self, method: &Method, pattern: &str) -> Option<&'static str> {
        self.0.get(&(method.clone(), shape(pattern))).copied()
    }
}

/// A route with its variables unnamed: the document's `/a/{id}` and the router's `/a/:param0`
/// are both `/a/{}`.
pub(super) fn shape(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if segment.starts_with(':') || (segment.starts_with('{') && segment.ends_with('}')) {
                "{}"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A claim held while the handler runs.
struct Held {
    place: String,
    owner: String,
    fingerprint: String,
    /// The quota key the stored response counts against, when there is a quota.
    quota_key: Option<String>,
}

enum Claimed {
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
        operations: Operations,
    ) -> Self {
        Self {
            store,
            outcomes,
            cipher,
            prefix,
            lease,
            ttl: Duration::from_secs(24 * 3600),
            quota,
            operations,
        }
    }

    /// Refuses a claimed key whose owner's quota is spent, freeing the key again.
    async fn check_quota(&self, held: &Held) -> Result<(), poem::Error> {
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
    fn handler_deadline(&self) -> Duration {
        self.lease * 2 / 3
    }

    /// Claims `key` for `request`: run the handler, replay the stored response, or a 409.
    async fn claim(
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
        self.store
            .complete(
                &held.place,
                &held.owner,
                &held.fingerprint,
                sealed,
                self.ttl,
            )
            .await
    }

    async fn release(&self, held: &Held) {
        if let Err(e) = self
            .store
            .release(&held.place, &held.owner, &held.fingerprint)
            .await
        {
            tracing::warn!(error = %e, "could not release an idempotency claim; its lease will");
        }
    }

    /// Commits a 2xx's outcome with its change, then stores it in the fast state; frees the key
    /// for anything else.
    async fn finish(
        &self,
        held: Held,
        outcome: poem::Result<Response>,
        commits: &HeldCommits,
    ) -> poem::Result<Response> {
        let response = match outcome {
            Ok(response) if response.status().is_success() => response,
            other => {
                // A failure changed nothing the key must remember. A store call that did commit
                // before the handler failed keeps its change, as without a key.
                if let Some(change) = commits.take()
                    && let Err(e) = change.commit(None, now_ms()).await
                {
                    tracing::error!(error = %e, "could not commit the change of a failed keyed request");
                }
                self.release(&held).await;
                return other;
            }
        };
        let (response, plain) = encode(response).await;
        if fault_forget_outcomes() {
            if let Some(change) = commits.take() {
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
            match commits.take() {
                Some(change) => change.commit(Some(&record), now_ms()).await,
                // A 2xx that changed nothing still answers every retry the same way.
                None => self.outcomes.put_outcome(&record, now_ms()).await,
            }
        };
        // Bounded by the rest of the lease, so the commit settles before a retry may claim.
        let wait = self.lease.saturating_sub(self.handler_deadline());
        match tokio::time::timeout(wait, committing).await {
            Ok(Ok(())) => {}
            Ok(Err(StoreError::Conflict(_))) => {
                // Another attempt's outcome was committed first: this change rolled back, and
                // the client gets the one that counts.
                return match self.committed(&held).await {
                    Ok(Some(replay)) => Ok(replay),
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

/// Wraps the API: gives a mutating request that carries a key its [`Ticket`], and finishes the
/// ticket when the route has answered.
pub struct Idempotency<E> {
    inner: E,
    guard: Arc<IdempotencyGuard>,
}

impl<E> Idempotency<E> {
    pub fn new(inner: E, guard: Arc<IdempotencyGuard>) -> Self {
        Self { inner, guard }
    }
}

impl<E: Endpoint> Endpoint for Idempotency<E> {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        // Only mutating requests have a parsed key (the middleware ignores it on the others).
        let Some(key) = req.data::<IdempotencyHeader>().and_then(|h| h.0.clone()) else {
            return self.inner.call(req).await.map(IntoResponse::into_response);
        };
        let ticket = Arc::new(Ticket {
            guard: self.guard.clone(),
            key,
            stage: Mutex::new(Stage::Open),
        });
        req.set_data(ticket.clone());
        let deadline = self.guard.handler_deadline();
        let commits = Arc::new(HeldCommits::default());
        let handled = tokio::time::timeout(deadline, commits.scope(self.inner.call(req))).await;
        let Ok(outcome) = handled else {
            // A change it held is rolled back (dropped) with its scope.
            drop(commits.take());
            // Stopped at its deadline. A claim it held is neither stored nor released: the
            // outcome may be a commit that landed, so retries get 409 until the lease ends.
            let held = matches!(*ticket.stage(), Stage::Claimed(_));
            tracing::error!(
                deadline_ms = deadline.as_millis() as u64,
                claimed = held,
                "a keyed request ran past its deadline and was stopped"
            );
            let wait = if held {
                self.guard.lease.saturating_sub(deadline)
            } else {
                Duration::from_secs(1)
            };
            return Err(ApiFailure::from(crate::service::ServiceError::Unavailable)
                .with_retry_after(wait)
                .into());
        };
        let outcome = outcome.map(IntoResponse::into_response);
        let stage = std::mem::replace(&mut *ticket.stage(), Stage::Open);
        match stage {
            Stage::Claimed(held) => self.guard.finish(held, outcome, &commits).await,
            Stage::Replayed(mut replay) => {
                // The claim answered for the handler; the route still names the operation.
                if let Err(err) = &outcome
                    && let Some(operation) = err.data::<OperationId>()
                {
                    replay.set_data(*operation);
                }
                Ok(replay)
            }
            Stage::Open => {
                // Not claimed, so nothing to commit with it: the change commits alone.
                if let Some(change) = commits.take() {
                    change.commit(None, now_ms()).await.map_err(|e| {
                        tracing::error!(error = %e, "could not commit an unclaimed keyed change");
                        ApiFailure::from(crate::service::ServiceError::Unavailable)
                    })?;
                }
                let changed = outcome.as_ref().is_ok_and(|r| r.status().is_success());
                if changed {
                    tracing::error!(
                        "a mutating operation took an Idempotency-Key without claiming it (its input is not `Idempotent`)"
                    );
                    debug_assert!(!changed, "mutating operation without `Idempotent` input");
                }
                outcome
            }
        }
    }
}

/// One keyed request's idempotency: open, then claimed by [`Idempotent`] or replayed.
pub struct Ticket {
    guard: Arc<IdempotencyGuard>,
    key: IdempotencyKey,
    stage: Mutex<Stage>,
}

enum Stage {
    Open,
    Claimed(Held),
    Replayed(Response),
}

impl Ticket {
    fn stage(&self) -> std::sync::MutexGuard<'_, Stage> {
        // Nothing panics while holding the lock; a poisoned one still holds a valid stage.
        self.stage.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn claim(
        &self,
        req: &Request,
        principal: Option<String>,
        quota_owner: Option<String>,
        body_digest: [u8; 32],
        permission: Option<Permission<'_>>,
    ) -> Result<(), poem::Error> {
        let operation = req
            .data::<PathPattern>()
            .and_then(|pattern| self.guard.operations.find(req.method(), &pattern.0));
        let (Some(operation), Some(principal)) = (operation, principal) else {
            tracing::error!("an idempotent request has no known operation or no principal");
            return Err(ApiFailure::internal().into());
        };
        let request = IdempotentRequest {
            principal,
            operation,
            method: req.method().as_str(),
            path: req.uri().path(),
            body_digest,
            quota_owner,
        };
        match self.guard.claim(&self.key, request).await? {
            Claimed::Run(held) => {
                self.guard.check_quota(&held).await?;
                *self.stage() = Stage::Claimed(held);
                Ok(())
            }
            Claimed::Replay(response) => {
                if let Some(permission) = permission {
                    may_replay(req, &permission).await?;
                }
                *self.stage() = Stage::Replayed(response);
                // Stops the handler; [`Idempotency`] answers with the replay instead.
                Err(ApiFailure::internal().into())
            }
        }
    }
}

/// Asks the service whether the bearer-authenticated caller may still perform what
/// `permission` names; refused, the answer a fresh request would get.
async fn may_replay(req: &Request, permission: &Permission<'_>) -> Result<(), poem::Error> {
    let services = req.data::<Arc<Services>>();
    let principal = match req.data::<AuthOutcome>() {
        Some(AuthOutcome::Authenticated(principal)) => Some(principal),
        _ => None,
    };
    let (Some(services), Some(principal)) = (services, principal) else {
        tracing::error!("a keyed replay has no services or no authenticated caller");
        return Err(ApiFailure::internal().into());
    };
    services
        .may_replay(principal, permission)
        .await
        .map_err(|e| {
            tracing::info!("idempotent replay refused: the caller may no longer perform it");
            ApiFailure::from(e).into()
        })
}

/// What a bearer-authenticated operation's parsed body asks to do, with the ids of its path
/// (`path_id`): asked again before a keyed repeat is answered.
pub trait Permitted {
    fn permission<'a>(&'a self, req: &'a Request) -> Permission<'a>;
}

/// The path variable `name` of `operation`'s route, as the route matched it (the value
/// `Path<String>` reads); empty when the route has none of that name. poem-openapi registers a
/// route's variables by position (`:param0`, `:param1`, as the route table's test shows), so
/// the name is looked up in the operation's template.
pub fn path_id<'a>(req: &'a Request, operation: Operation, name: &str) -> &'a str {
    let (_, template) = operation.http();
    template
        .split('/')
        .filter(|segment| segment.starts_with('{'))
        .position(|segment| segment.trim_matches(['{', '}']) == name)
        .and_then(|index| req.raw_path_param(&format!("param{index}")))
        .unwrap_or_default()
}

/// What an idempotent operation's input tells of its request.
pub trait IdempotentInput {
    /// The authenticated caller, whose record it is: `tok:<token id>` or `runner:<id>`.
    fn principal(&self, req: &Request) -> Option<String>;
    /// Whose stored-bytes quota the record counts against: `user:<id>` or `runner:<id>`.
    fn quota_owner(&self, req: &Request) -> Option<String>;
    /// SHA-256 of the canonical body.
    fn body_digest(&self) -> [u8; 32];
    /// What must still be permitted for a replay to be answered; `None`: nothing beyond the
    /// authentication that already ran.
    fn permission<'a>(&'a self, req: &'a Request) -> Option<Permission<'a>>;
}

/// A bearer-authenticated body: the route's security scheme has already accepted the token.
impl<T: Permitted> IdempotentInput for JsonBody<T> {
    fn principal(&self, req: &Request) -> Option<String> {
        match req.data::<AuthOutcome>()? {
            AuthOutcome::Authenticated(principal) => Some(token_subject(principal)),
            AuthOutcome::Failed(_) => None,
        }
    }

    fn quota_owner(&self, req: &Request) -> Option<String> {
        match req.data::<AuthOutcome>()? {
            AuthOutcome::Authenticated(principal) => Some(format!("user:{}", principal.user_id)),
            AuthOutcome::Failed(_) => None,
        }
    }

    fn body_digest(&self) -> [u8; 32] {
        self.digest
    }

    fn permission<'a>(&'a self, req: &'a Request) -> Option<Permission<'a>> {
        Some(self.value.permission(req))
    }
}

/// An operation's input, extracted as `B` and then claimed under the request's
/// `Idempotency-Key` (if it has one). Documented exactly as `B`.
pub struct Idempotent<B>(pub B);

impl<'a, B> ApiExtractor<'a> for Idempotent<B>
where
    B: ApiExtractor<'a> + IdempotentInput + Send,
{
    const TYPES: &'static [ApiExtractorType] = B::TYPES;
    const PARAM_IS_REQUIRED: bool = B::PARAM_IS_REQUIRED;
    type ParamType = B::ParamType;
    type ParamRawType = B::ParamRawType;

    fn register(registry: &mut Registry) {
        B::register(registry);
    }

    fn security_schemes() -> Vec<&'static str> {
        B::security_schemes()
    }

    fn has_security_fallback() -> bool {
        B::has_security_fallback()
    }

    fn param_in() -> Option<MetaParamIn> {
        B::param_in()
    }

    fn param_schema_ref() -> Option<MetaSchemaRef> {
        B::param_schema_ref()
    }

    fn request_meta() -> Option<MetaRequest> {
        B::request_meta()
    }

    fn param_raw_type(&self) -> Option<&Self::ParamRawType> {
        self.0.param_raw_type()
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        param_opts: ExtractParamOptions<Self::ParamType>,
    ) -> poem::Result<Self> {
        // Boxed, as poem-openapi does for its own extractors (rust-lang/rust#100013).
        let input = B::from_request(request, body, param_opts).boxed().await?;
        if let Some(ticket) = request.data::<Arc<Ticket>>() {
            let (principal, digest) = (input.principal(request), input.body_digest());
            let quota_owner = input.quota_owner(request);
            let permission = input.permission(request);
            ticket
                .claim(request, principal, quota_owner, digest, permission)
                .await?;
        }
        Ok(Self(input))
    }
}

/// status (2 bytes) | content-type length (2) | content-type | body
async fn encode(response: Response) -> (Response, Vec<u8>) {
    // The parts stay: the route's response data (its operation id) travels on.
    let (mut parts, body) = response.into_parts();
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let body = body.into_vec().await.unwrap_or_default();
    let mut plain = Vec::with_capacity(4 + content_type.len() + body.len());
    plain.extend_from_slice(&parts.status.as_u16().to_be_bytes());
    plain.extend_from_slice(&(content_type.len() as u16).to_be_bytes());
    plain.extend_from_slice(content_type.as_bytes());
    plain.extend_from_slice(&body);
    if let Ok(value) = HeaderValue::from_str(&content_type) {
        parts.headers.insert(header::CONTENT_TYPE, value);
    }
    (Response::from_parts(parts, Body::from(body)), plain)
}

fn decode(plain: &[u8]) -> Option<Response> {
    let status =
        StatusCode::from_u16(u16::from_be_bytes([*plain.first()?, *plain.get(1)?])).ok()?;
    let ct_len = usize::from(u16::from_be_bytes([*plain.get(2)?, *plain.get(3)?]));
    let content_type = std::str::from_utf8(plain.get(4..4 + ct_len)?).ok()?;
    let body = plain.get(4 + ct_len..)?.to_vec();
    let mut response = Response::builder()
        .status(status)
        .content_type(content_type)
        .body(body);
    response
        .headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_found_by_the_route_poem_matched() {
        let operations =
            Operations::of(<crate::http::api::AllApis as poem_openapi::OpenApi>::meta());
        let find = |method, pattern| operations.find(&method, pattern);
        assert_eq!(
            find(Method::POST, "/v1/personal-access-tokens"),
            Some("issuePersonalAccessToken")
        );
        assert_eq!(
            find(
                Method::DELETE,
                "/v1/workspaces/:param0/access-tokens/:param1"
            ),
            Some("revokeWorkspaceAccessToken")
        );
        assert_eq!(
            find(Method::POST, "/v1/runner/webhook-deliveries/:param0/status"),
            Some("reportDeliveryStatus")
        );
        assert_eq!(find(Method::PUT, "/v1/personal-access-tokens"), None);
    }

    #[tokio::test]
    async fn records_decode_to_the_same_response() {
        let original = Response::builder()
            .status(StatusCode::OK)
            .content_type("application/json")
            .body("{\"a\":1}");
        let (_, plain) = encode(original).await;
        let replay = decode(&plain).unwrap();
        assert_eq!(replay.status(), StatusCode::OK);
        assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
        assert_eq!(replay.into_body().into_string().await.unwrap(), "{\"a\":1}");
    }
}
