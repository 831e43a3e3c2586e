//! Runners and deliveries after the fact: what an administrator sees of a pool's
//! runners and deliveries, disabling, enabling and removing a runner, and resending a delivery.
//! The rules (when a runner is disabled, what a resend may do) are the service's
//! (`service/runner_admin.rs`); the adapters apply each step atomically.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{CommandStatus, DeliveryStatus, NewAuditEvent};
use crate::storage::{StoreError, WriteContext};

/// A runner as `cpctl runners list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerStatus {
    pub id: Uuid,
    pub pool_id: Uuid,
    pub name: String,
    pub delivery_url: Option<String>,
    pub created_at: DateTime<Utc>,
    pub consecutive_failures: i32,
    pub failing_since: Option<DateTime<Utc>>,
    pub held_until: Option<DateTime<Utc>>,
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
    pub removed_at: Option<DateTime<Utc>>,
    /// The last attempt to it that a 2xx answered, and the last that failed.
    pub last_success_at: Option<DateTime<Utc>>,
    pub last_failure_at: Option<DateTime<Utc>>,
    pub keys: Vec<RunnerKeyStatus>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunnerKeyStatus {
    pub id: Uuid,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A runner's run of failures, read after a failed attempt to apply the disable rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunnerHealth {
    pub consecutive_failures: i32,
    pub failing_since: Option<DateTime<Utc>>,
    pub disabled: bool,
    pub removed: bool,
}

/// What removing a runner did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovedRunner {
    pub keys_revoked: u64,
    /// Its `pending` deliveries made due at once, so another runner of the pool takes them.
    pub deliveries_moved: u64,
}

/// Which deliveries `cpctl deliveries list` shows.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryFilter {
    pub pool_id: Uuid,
    pub status: Option<DeliveryStatus>,
    /// Last changed at or after it.
    pub since: Option<DateTime<Utc>>,
    pub limit: u32,
}

/// A delivery as `cpctl deliveries list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliverySummary {
    pub id: Uuid,
    pub command_id: Uuid,
    pub workspace_id: Uuid,
    pub organisation_id: Uuid,
    pub pool_id: Uuid,
    pub pool_deleted: bool,
    pub status: DeliveryStatus,
    pub command_status: CommandStatus,
    pub timeout_seconds: i32,
    pub attempts: i32,
    /// What its attempts carry as `webhook-id`.
    pub webhook_id: Uuid,
    pub resent_as: Option<Uuid>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub waiting_for_runner: bool,
    pub detail: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A failed delivery resent as a new command with a new delivery carrying its `webhook-id`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResendFailed {
    pub delivery_id: Uuid,
    pub new_command_id: Uuid,
    pub new_delivery_id: Uuid,
    pub webhook_id: Uuid,
    pub at: DateTime<Utc>,
    pub deadline_at: DateTime<Utc>,
    pub events: Vec<NewAuditEvent>,
}

/// What the automatic disable was decided on, re-checked by the write (`disable_runner`).
#[derive(Debug, Clone, Copy)]
pub struct StillFailing {
    pub failures: i32,
    pub failing_since_at_most: DateTime<Utc>,
}

#[async_trait]
pub trait RunnerAdminStore: Send + Sync {
    /// Every runner of the pool, removed ones included, oldest first.
    async fn list_runners(&self, pool_id: Uuid) -> Result<Vec<RunnerStatus>, StoreError>;
    /// The pool's runners as [`Self::list_runners`], at most `limit`, after the runner `after`.
    async fn runners_page(
        &self,
        pool_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<RunnerStatus>, StoreError>;
    async fn runner_health(&self, runner_id: Uuid) -> Result<Option<RunnerHealth>, StoreError>;
    /// Disables a runner neither disabled nor removed; `false` if it was either (or is absent).
    /// With `still_failing`, only while the failures that decided it still stand under the
    /// lock: at least that many in a row, the run begun at or before that time (a success
    /// committed meanwhile by another replica resets both).
    async fn disable_runner(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        reason: &str,
        still_failing: Option<StillFailing>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError>;
    /// Enables a disabled runner, forgetting its failures and breaker, and wakes its pool's
    /// deliveries waiting for a runner; `false` if it was not disabled or is removed.
    async fn enable_runner(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError>;
    /// Removes a runner not yet removed: revokes its keys, and makes its pool's `pending`
    /// deliveries whose last attempt went to it due at once; `None` if already removed.
    async fn remove_runner(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<Option<RemovedRunner>, StoreError>;
}

#[async_trait]
pub trait DeliveryAdminStore: Send + Sync {
    /// A pool's deliveries, last changed first.
    async fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<DeliverySummary>, StoreError>;
    /// Up to `filter.limit` of a pool's deliveries, newest first, after the one with id
    /// `after` (the admin API's pages: keyed on creation, so a page never shifts).
    async fn deliveries_page(
        &self,
        filter: &DeliveryFilter,
        after: Option<Uuid>,
    ) -> Result<Vec<DeliverySummary>, StoreError>;
    async fn delivery_summary(
        &self,
        delivery_id: Uuid,
    ) -> Result<Option<DeliverySummary>, StoreError>;
    /// Makes a `pending` delivery of an open command due at `at`; `false` if it is not, or if
    /// an attempt of it is in flight.
    async fn resend_pending(
        &self,
        write: &WriteContext,
        delivery_id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError>;
    /// Copies a `failed` delivery's command as a new `queued` command whose delivery carries
    /// `webhook_id`, and marks the failed one resent; `false` if it is no longer failed, was
    /// resent already, or its pool is deleted.
    async fn resend_failed(
        &self,
        write: &WriteContext,
        resend: &ResendFailed,
    ) -> Result<bool, StoreError>;
}
