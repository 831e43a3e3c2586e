//! Outgoing webhook deliveries: runners' delivery URLs, leasing attempts, and their records.
//!
//! The state of a delivery's sending lives in the records store, so every replica shares the
//! work and none sends what another is sending: a due delivery is leased by moving its
//! `next_attempt_at` past the attempt's total timeout, in the same transaction that records the
//! attempt as started (Postgres skips rows another replica has locked; SQLite's single writer
//! orders the leases). A replica that dies mid-attempt leaves the attempt unfinished and the
//! delivery due again once the lease passes; the next lease marks that attempt abandoned.
//! The service layer decides the schedule, the runner's health rule and what a final failure
//! writes; the adapters apply each step atomically.
//!
//! Fair shares (issue #26): the service asks for due deliveries with [`DueQuery`], which takes
//! turns between organisations and, within one, between its pools, then leases the ones its
//! caps allow by id. A runner's breaker (`runners.held_until`) keeps a runner that keeps
//! answering slowly out of the lease for a cool-down, then lets one attempt at a time through.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{CommandStatus, DeliveryStatus, NewAuditEvent};
use crate::storage::StoreError;
use crate::storage::WriteContext;

/// A runner's failures in a row from which it is skipped while its pool has a runner with
/// fewer (decided here because the lease's runner choice is one statement).
pub const FAILING_RUNNER_THRESHOLD: i32 = 3;

/// Which due deliveries to consider leasing next ([`DeliveryStore::due_deliveries`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DueQuery<'a> {
    pub now: DateTime<Utc>,
    /// At most this many of one pool, its earliest due first.
    pub per_pool: u32,
    /// At most this many of one organisation, its pools taking turns.
    pub per_organisation: u32,
    /// None of these pools or organisations (at their cap in this process).
    pub skip_pools: &'a [Uuid],
    pub skip_organisations: &'a [Uuid],
    pub limit: u32,
}

/// A due delivery, with what its fair share is counted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueDelivery {
    pub delivery_id: Uuid,
    pub organisation_id: Uuid,
    pub pool_id: Uuid,
}

/// What an attempt's end does to its runner's breaker (decided by the service).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerStep {
    /// The attempt timed out or took long: the runner's slow streak grows; otherwise it is
    /// reset and the breaker closes.
    pub slow: bool,
    /// The streak at which the breaker opens; 0: never.
    pub trip_after: i32,
    /// Until when an opened breaker holds the runner.
    pub hold_until: DateTime<Utc>,
}

/// One attempt, leased for sending: everything the request needs.
#[derive(Debug, Clone, PartialEq)]
pub struct LeasedAttempt {
    pub delivery_id: Uuid,
    /// What it carries as `webhook-id`: the delivery's id, or for a delivery created by
    /// resending a failed one, the failed one's.
    pub webhook_id: Uuid,
    pub command_id: Uuid,
    pub workspace_id: Uuid,
    pub organisation_id: Uuid,
    pub pool_id: Uuid,
    /// 1 for the first.
    pub number: i32,
    pub runner_id: Uuid,
    pub url: String,
    pub command: String,
    pub args: Vec<String>,
    pub environment_id: Option<Uuid>,
    pub timeout_seconds: i32,
    pub deadline_at: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
    /// The command's state when leased (its delivery was `pending`).
    pub command_status: CommandStatus,
}

/// What leasing found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Leased {
    pub attempts: Vec<LeasedAttempt>,
    /// Due deliveries whose pool has no runner to send to: left waiting, without an attempt,
    /// until one can receive (a runner may still report on them through the signed route).
    pub waiting: u64,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptResult {
    pub delivery_id: Uuid,
    pub number: i32,
    pub runner_id: Uuid,
    pub finished_at: DateTime<Utc>,
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    /// Why it failed; `None` for a 2xx.
    pub error: Option<String>,
    pub breaker: BreakerStep,
    pub next: AttemptNext,
}

/// What follows an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptNext {
    /// A runner took it (2xx): nothing more is sent.
    Delivered,
    /// It failed; the next attempt is due then.
    RetryAt(DateTime<Utc>),
    /// It failed and it was the last: the delivery and its command fail, with the event, if
    /// both are still in the states read.
    GiveUp {
        command_id: Uuid,
        /// The command's state when leased (open): it fails only if it is still that.
        command_from: CommandStatus,
        delivery_from: DeliveryStatus,
        detail: String,
        // Boxed: the event is most of the variant's size.
        event: Box<NewAuditEvent>,
    },
}

/// What recording an attempt's end did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptRecorded {
    /// The attempt and what follows it are recorded.
    Applied,
    /// The attempt is recorded, but the delivery moved on meanwhile (a report, a timeout, or
    /// another replica's lease after ours ran out): its schedule is left alone.
    Superseded,
}

/// One recorded attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    pub number: i32,
    pub runner_id: Uuid,
    pub url: String,
    pub started_at: DateTime<Utc>,
    /// `None` while in flight, or when the replica sending it died.
    pub finished_at: Option<DateTime<Utc>>,
    pub status_code: Option<i32>,
    pub latency_ms: Option<i32>,
    pub error: Option<String>,
}

/// A delivery with its sending state and attempts (`cpctl deliveries show`).
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryReport {
    pub delivery_id: Uuid,
    pub command_id: Uuid,
    pub workspace_id: Uuid,
    pub pool_id: Uuid,
    pub status: DeliveryStatus,
    pub command_status: CommandStatus,
    pub detail: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub attempts: Vec<AttemptRecord>,
}

#[async_trait]
pub trait DeliveryStore: Send + Sync {
    /// Whether any delivery is due at `now`: a read that takes no lock, so an idle dispatcher
    /// never takes SQLite's write lock.
    async fn any_due(&self, now: DateTime<Utc>) -> Result<bool, StoreError>;
    /// Due deliveries to lease next, a read that takes no lock: at most `per_pool` of a pool
    /// (earliest due first) and `per_organisation` of an organisation (its pools taking turns),
    /// organisations taking turns (every one's first, then every one's second…), none of the
    /// skipped pools and organisations, and none of a pool whose every runner with a URL is
    /// held by its breaker.
    async fn due_deliveries(&self, query: &DueQuery<'_>) -> Result<Vec<DueDelivery>, StoreError>;
    /// Leases those of `deliveries` still due (on Postgres, not being leased by another
    /// replica) whose command is open and still `pending`, each to one runner of its pool
    /// with a delivery URL, a live key and no breaker holding it (runners under
    /// [`FAILING_RUNNER_THRESHOLD`] first, then the least recently chosen; a runner whose
    /// breaker's cool-down ended only when no other can receive, for one attempt, which holds
    /// it until `lease_until`), recording each attempt as started and moving its
    /// `next_attempt_at` to `lease_until`. A due delivery that left `pending` stops being due;
    /// one without a runner to send to waits for one (see
    /// [`RunnerStore::set_runner_url`](crate::storage::RunnerStore::set_runner_url)); one whose
    /// runners are all held stays due. Unfinished attempts of a leased delivery are marked
    /// abandoned.
    async fn lease_attempts(
        &self,
        write: &WriteContext,
        now: DateTime<Utc>,
        deliveries: &[Uuid],
        lease_until: DateTime<Utc>,
    ) -> Result<Leased, StoreError>;
    /// Records how an attempt ended and applies what follows it, in one transaction; the
    /// schedule moves only while the delivery is still on this attempt's lease. The runner's
    /// failures in a row and its breaker follow the answer whatever became of the delivery.
    async fn finish_attempt(
        &self,
        write: &WriteContext,
        result: &AttemptResult,
    ) -> Result<AttemptRecorded, StoreError>;
    /// The delivery and its attempts, oldest first.
    async fn delivery_report(
        &self,
        delivery_id: Uuid,
    ) -> Result<Option<DeliveryReport>, StoreError>;
}
