//! Runner commands and their webhook deliveries: submission, the runner's reports, and the
//! timeout sweep.
//!
//! As for pools and runners (`runners.rs`), the service decides every transition
//! (`domain::states`); each method applies one change atomically with its audit event,
//! re-checking in the transaction the state the service read.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{CommandStatus, DeliveryStatus, NewAuditEvent};
use crate::storage::{StoreError, WriteContext};

#[derive(Debug, Clone, PartialEq)]
pub struct RunnerCommand {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub pool_id: Uuid,
    pub environment_id: Option<Uuid>,
    pub command: String,
    pub args: Vec<String>,
    pub timeout_seconds: i32,
    pub status: CommandStatus,
    pub submitted_by: Uuid,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Past it, an open command is failed as timed out (the service sets it at submission).
    pub deadline_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WebhookDelivery {
    pub id: Uuid,
    pub command_id: Uuid,
    pub status: DeliveryStatus,
    pub detail: Option<String>,
    pub exit_code: Option<i32>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A delivery with its command's state and where it belongs.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryContext {
    pub delivery: WebhookDelivery,
    pub command_status: CommandStatus,
    pub pool_id: Uuid,
    pub workspace_id: Uuid,
    pub organisation_id: Uuid,
    /// The runner its latest attempt was sent to: the runner holding it. `None` while nothing
    /// was sent (a pool whose runners report by hand).
    pub held_by: Option<Uuid>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitOutcome {
    Created,
    PoolNotFound,
    PoolDeleted,
}

#[derive(Debug, Clone)]
pub struct DeliveryTransition {
    pub delivery_id: Uuid,
    /// The state the service read; the change applies only if it is still the state.
    pub from: DeliveryStatus,
    pub to: DeliveryStatus,
    pub detail: Option<String>,
    pub exit_code: Option<i32>,
    pub at: DateTime<Utc>,
    pub event: NewAuditEvent,
}

/// An open command past its deadline, with its delivery, as the timeout sweep read it (no lock).
#[derive(Debug, Clone, PartialEq)]
pub struct OverdueCommand {
    pub command_id: Uuid,
    pub workspace_id: Uuid,
    pub organisation_id: Uuid,
    pub pool_id: Uuid,
    pub delivery_id: Uuid,
    pub status: CommandStatus,
    pub delivery_status: DeliveryStatus,
    pub timeout_seconds: i32,
    pub deadline_at: DateTime<Utc>,
}

/// Fails a timed-out command and its delivery.
#[derive(Debug, Clone)]
pub struct CommandTimeout {
    pub command_id: Uuid,
    /// The states the service read; the change applies only if both are still the states (and
    /// the deadline has passed at `at`), so of two replicas sweeping at once one applies it.
    pub from: CommandStatus,
    pub delivery_from: DeliveryStatus,
    pub to: CommandStatus,
    pub delivery_to: DeliveryStatus,
    /// Kept as the delivery's `detail`.
    pub detail: String,
    pub at: DateTime<Utc>,
    pub event: NewAuditEvent,
}

/// Commands and their deliveries.
#[async_trait]
pub trait CommandStore: Send + Sync {
    /// Inserts the command and its delivery if the pool is live in the command's workspace.
    async fn submit_command(
        &self,
        write: &WriteContext,
        command: &RunnerCommand,
        delivery: &WebhookDelivery,
        event: &NewAuditEvent,
    ) -> Result<SubmitOutcome, StoreError>;
    async fn get_delivery(&self, delivery_id: Uuid) -> Result<Option<DeliveryContext>, StoreError>;
    /// Moves the delivery and its command; `None` when either moved meanwhile (a conflict).
    async fn transition_delivery(
        &self,
        write: &WriteContext,
        transition: &DeliveryTransition,
    ) -> Result<Option<WebhookDelivery>, StoreError>;
    /// Open commands whose deadline is at or before `now`, earliest first, at most `limit`.
    async fn overdue_commands(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<OverdueCommand>, StoreError>;
    /// Fails the command and its delivery with the event, in one transaction; false when
    /// either moved since it was read (a report, a cancellation, or another replica's sweep).
    async fn time_out_command(
        &self,
        write: &WriteContext,
        timeout: &CommandTimeout,
    ) -> Result<bool, StoreError>;
}
