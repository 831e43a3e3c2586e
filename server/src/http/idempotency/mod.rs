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
//! - The [`Idempotent`] extractor claims the ticket and hands the handler its input with the
//!   [`WriteContext`] its writes take (held for the outcome when claimed), or answers with
//!   the saved response. It wraps an operation's input (a
//!   bearer-authenticated [`JsonBody`], or a runner's [`Signed`] body), so the claim comes
//!   where the rule needs it: after the caller is authenticated and the path and body are
//!   accepted (and, for a runner, after its signature and its rate limit), before the handler
//!   runs. Claiming earlier, in the wrapper, would answer a replay or a 409 to a request that
//!   is refused with a 400 or 401; and a runner is known only once its signature over the
//!   body is verified.
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
//! A mutating request without a key is stopped at the same deadline, with `retry-after: 1`:
//! its transaction rolls back unless it was committing, so without a key a retry is safe only
//! for a change the caller can look up. Either way the caller gets an answer, not a hang on a
//! connection that stopped answering mid-statement. A policy install, which compiles and
//! measures a component before its one write, has a lease ten times as long.
//!
//! The parts: `guard` claims, stores and replays records (with the quota and the committed
//! outcome); `input` is the extractor; `record` is what a record holds and where it lives.
//!
//! [`Signed`]: super::auth::Signed
//! [`WriteContext`]: crate::storage::WriteContext

mod guard;
mod input;
mod record;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use poem::{Endpoint, IntoResponse, Request, Response};
use poem_openapi::OperationId;

use self::guard::Held;
use self::input::ReplayGate;
use super::error::ApiFailure;
use crate::domain::IdempotencyKey;
use crate::storage::OutcomeSlot;

pub use self::guard::IdempotencyGuard;
pub use self::input::{Idempotent, IdempotentInput, Permitted, admin_permission, path_id};

pub const REPLAYED_HEADER: &str = "idempotency-replayed";

/// The request's parsed `Idempotency-Key`, put in the request data by the middleware.
#[derive(Debug, Clone, Default)]
pub struct IdempotencyHeader(pub Option<IdempotencyKey>);

/// Wraps the API: gives a mutating request that carries a key its [`Ticket`], and finishes the
/// ticket when the route has answered.
pub struct Idempotency<E> {
    inner: E,
    guard: Arc<IdempotencyGuard>,
    /// The policy install's: compiling and measuring a large component is minutes of work
    /// before its one write, so its lease (and deadline) is [`INSTALL_LEASE_FACTOR`] longer.
    install: Arc<IdempotencyGuard>,
}

/// A Python authorizer (a 40 MB component) took over 20 s to compile and measure on CI's
/// machine, past the 30 s lease's 20 s deadline; ten times the lease leaves room for a slower
/// one, and the install's key still answers 409 until its lease ends, never a second run.
pub const INSTALL_LEASE_FACTOR: u32 = 10;

impl<E> Idempotency<E> {
    pub fn new(inner: E, guard: Arc<IdempotencyGuard>) -> Self {
        let install = Arc::new(guard.with_lease(guard.lease() * INSTALL_LEASE_FACTOR));
        Self {
            inner,
            guard,
            install,
        }
    }

    /// The guard of a request: the install's, or every other route's.
    fn guard_of(&self, req: &Request) -> &Arc<IdempotencyGuard> {
        let install = crate::domain::Operation::InstallPolicy.spec();
        if req.method().as_str() == install.method && req.uri().path() == install.route {
            &self.install
        } else {
            &self.guard
        }
    }
}

/// The methods whose requests may write, and so take the handler's deadline.
pub(super) fn is_mutating(method: &poem::http::Method) -> bool {
    matches!(method.as_str(), "POST" | "PUT" | "DELETE" | "PATCH")
}

impl<E: Endpoint> Idempotency<E> {
    /// A write without a key, stopped at the same deadline as a keyed one. There is no claim to
    /// keep, so the caller is told to retry in a second; a commit in flight at that instant may
    /// still land, which only a key makes safe to retry (docs/decisions.md).
    async fn unkeyed(&self, req: Request) -> poem::Result<Response> {
        let deadline = self.guard_of(&req).handler_deadline();
        match tokio::time::timeout(deadline, self.inner.call(req)).await {
            Ok(outcome) => outcome.map(IntoResponse::into_response),
            Err(_) => {
                tracing::error!(
                    deadline_ms = deadline.as_millis() as u64,
                    "a request without a key ran past its deadline and was stopped"
                );
                Err(ApiFailure::from(crate::service::ServiceError::Unavailable)
                    .with_retry_after(Duration::from_secs(1))
                    .into())
            }
        }
    }
}

impl<E: Endpoint> Endpoint for Idempotency<E> {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        // Only mutating requests have a parsed key (the middleware ignores it on the others).
        let Some(key) = req.data::<IdempotencyHeader>().and_then(|h| h.0.clone()) else {
            if !is_mutating(req.method()) {
                // Reads bound their own statements; a stream must outlive any deadline.
                return self.inner.call(req).await.map(IntoResponse::into_response);
            }
            return self.unkeyed(req).await;
        };
        let guard = self.guard_of(&req).clone();
        let ticket = Arc::new(Ticket {
            guard: guard.clone(),
            key,
            stage: Mutex::new(Stage::Open),
            slot: Arc::default(),
        });
        req.set_data(ticket.clone());
        let deadline = guard.handler_deadline();
        let handled = tokio::time::timeout(deadline, self.inner.call(req)).await;
        let Ok(outcome) = handled else {
            // A change it held is rolled back (dropped).
            drop(ticket.slot.take());
            // Stopped at its deadline. A claim it held is neither stored nor released: the
            // outcome may be a commit that landed, so retries get 409 until the lease ends.
            let held = matches!(*ticket.stage(), Stage::Claimed(..));
            tracing::error!(
                deadline_ms = deadline.as_millis() as u64,
                claimed = held,
                "a keyed request ran past its deadline and was stopped"
            );
            let wait = if held {
                guard.lease().saturating_sub(deadline)
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
            Stage::Claimed(held, gate) => {
                let gate = gate.as_deref();
                guard.finish(held, gate, outcome, &ticket.slot).await
            }
            // The extractor answered with the saved response (see `input`), which poem carries
            // as the route's error; the route still names the operation.
            Stage::Replayed => Ok(match outcome {
                Ok(response) => response,
                Err(err) => {
                    let operation = err.data::<OperationId>().copied();
                    let mut replay = err.into_response();
                    if let Some(operation) = operation {
                        replay.set_data(operation);
                    }
                    replay
                }
            }),
            Stage::Open => {
                // Not claimed: the handler's writes (if any) took an immediate context.
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

/// One keyed request's idempotency: open, then claimed by [`Idempotent`] or replayed. The
/// slot is where a claimed request's write context parks its transaction.
pub struct Ticket {
    guard: Arc<IdempotencyGuard>,
    key: IdempotencyKey,
    stage: Mutex<Stage>,
    slot: Arc<OutcomeSlot>,
}

enum Stage {
    Open,
    /// With what a stored outcome found after the handler must still be permitted (`None`
    /// for a runner's signed report).
    Claimed(Held, Option<Box<ReplayGate>>),
    Replayed,
}

impl Ticket {
    fn stage(&self) -> std::sync::MutexGuard<'_, Stage> {
        // Nothing panics while holding the lock; a poisoned one still holds a valid stage.
        self.stage.lock().unwrap_or_else(|e| e.into_inner())
    }
}
