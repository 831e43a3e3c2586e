//! Runner commands: submission (a bearer token's operation), the runner's signed reports on
//! their deliveries, and the sweep that fails commands past their deadline.

use serde_json::json;
use uuid::Uuid;

use super::runners::user_event;
use super::{Permission, RunnerPrincipal, ServiceError, Services};
use crate::domain::{
    CommandStatus, DeliveryStatus, NewAuditEvent, Principal, bounded_integer, parse_uuid,
    text_digest,
};
use crate::storage::{
    CommandTimeout, DeliveryTransition, OverdueCommand, RunnerCommand, SubmitOutcome,
    WebhookDelivery, WriteContext,
};

/// `POST .../runner-commands` body, each field within its bounds.
#[derive(Debug, Clone)]
pub struct SubmitCommandInput {
    pub pool_id: Uuid,
    pub command: String,
    pub args: Vec<String>,
    pub environment_id: Option<Uuid>,
    pub timeout_seconds: i32,
}

impl SubmitCommandInput {
    pub const MAX_COMMAND: usize = 200;
    pub const MAX_ARGS: usize = 64;
    pub const MAX_ARG: usize = 4096;
    pub const DEFAULT_TIMEOUT: i32 = 3600;
    pub const MIN_TIMEOUT: i64 = 1;
    pub const MAX_TIMEOUT: i64 = 86_400;

    pub fn parse_timeout(n: i64) -> Result<i32, String> {
        bounded_integer(n, Self::MIN_TIMEOUT, Self::MAX_TIMEOUT).map(|n| n as i32)
    }
}

/// A command's deadline counts from its submission, not from its dispatch: a command no runner
/// ever picks up must time out too, and nothing records a dispatch time before the runner's
/// first report.
pub fn command_deadline(
    created_at: chrono::DateTime<chrono::Utc>,
    timeout_seconds: i32,
) -> chrono::DateTime<chrono::Utc> {
    created_at + chrono::Duration::seconds(i64::from(timeout_seconds))
}

/// Overdue commands read per sweep; a full batch asks the sweeper to come back at once.
pub const TIMEOUT_BATCH: u32 = 100;

/// What one timeout sweep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeoutSweep {
    /// Commands this sweep failed (another replica may have failed some it read).
    pub failed: u64,
    /// The read was a full batch: more may be overdue.
    pub more: bool,
}

/// A runner's report on a delivery.
#[derive(Debug, Clone)]
pub struct DeliveryStatusInput {
    pub status: DeliveryStatus,
    pub detail: Option<String>,
    pub exit_code: Option<i32>,
}

impl DeliveryStatusInput {
    pub const MAX_DETAIL: usize = 2000;

    /// A runner reports what happened; `pending` is where deliveries start, never a report.
    pub const REPORTABLE: [DeliveryStatus; 4] = [
        DeliveryStatus::Received,
        DeliveryStatus::Running,
        DeliveryStatus::Succeeded,
        DeliveryStatus::Failed,
    ];

    pub fn parse_status(raw: &str) -> Result<DeliveryStatus, String> {
        match DeliveryStatus::parse(raw) {
            Ok(s) if Self::REPORTABLE.contains(&s) => Ok(s),
            _ => {
                let names: Vec<&str> = Self::REPORTABLE.iter().map(|s| s.as_str()).collect();
                Err(format!("must be one of {}", names.join(", ")))
            }
        }
    }
}

impl Services {
    /// Queues a command on a live pool of the workspace, with its webhook delivery `pending`.
    pub async fn submit_command(
        &self,
        principal: &Principal,
        workspace: &str,
        input: SubmitCommandInput,
        write: &WriteContext,
    ) -> Result<(RunnerCommand, WebhookDelivery), ServiceError> {
        let permission = Permission::SubmitRunnerCommand {
            workspace,
            input: &input,
        };
        self.authorize_permission(principal, &permission).await?;
        let workspace_id =
            parse_uuid(workspace).ok_or_else(|| ServiceError::forbidden("no access"))?;
        if let Some(env) = input.environment_id {
            // A token limited to some environments reaches only those.
            if !principal.environment_ids.is_empty() && !principal.environment_ids.contains(&env) {
                return Err(ServiceError::forbidden(
                    "the token has no access to this environment",
                ));
            }
            let lookup = self
                .store
                .lookup_targets(principal.organisation_id, &[], &[env])
                .await?;
            if !lookup
                .environments
                .iter()
                .any(|(id, ws)| *id == env && *ws == workspace_id)
            {
                return Err(ServiceError::NotFound {
                    message: "no such environment in this workspace".into(),
                    details: Some(json!({ "field": "environmentId" })),
                });
            }
        } else if !principal.environment_ids.is_empty() {
            return Err(ServiceError::forbidden(
                "the token is limited to some environments; name one in environmentId",
            ));
        }
        let now = Self::now();
        let command = RunnerCommand {
            id: Uuid::new_v4(),
            workspace_id,
            pool_id: input.pool_id,
            environment_id: input.environment_id,
            command: input.command,
            args: input.args,
            timeout_seconds: input.timeout_seconds,
            status: CommandStatus::Queued,
            submitted_by: principal.user_id,
            created_at: now,
            updated_at: now,
            deadline_at: command_deadline(now, input.timeout_seconds),
        };
        let delivery = WebhookDelivery {
            id: Uuid::new_v4(),
            command_id: command.id,
            status: DeliveryStatus::Pending,
            detail: None,
            exit_code: None,
            created_at: now,
            updated_at: now,
        };
        // The command line and its arguments may carry anything (a password): the audit log
        // keeps the line's length and digest and the arguments' count, never their text. The
        // runner gets the text in its dispatch; the command's record keeps it.
        let (command_bytes, command_sha256) = text_digest(&command.command);
        let event = user_event(
            write,
            principal,
            workspace_id,
            "runner_command.submitted",
            "runner_command",
            command.id,
            json!({
                "poolId": command.pool_id,
                "commandBytes": command_bytes,
                "commandSha256": command_sha256,
                "argCount": command.args.len(),
                "environmentId": command.environment_id,
                "timeoutSeconds": command.timeout_seconds,
                "deliveryId": delivery.id,
            }),
        );
        match self
            .store
            .submit_command(write, &command, &delivery, &event)
            .await?
        {
            SubmitOutcome::Created => Ok((command, delivery)),
            SubmitOutcome::PoolNotFound => Err(ServiceError::NotFound {
                message: "no such runner pool in this workspace".into(),
                details: Some(json!({ "field": "poolId" })),
            }),
            SubmitOutcome::PoolDeleted => Err(ServiceError::Conflict {
                code: "pool_deleted",
                message: "the runner pool is deleted".into(),
                details: Some(json!({ "field": "poolId" })),
            }),
        }
    }

    /// Moves a delivery (and its command) through its state machine.
    pub async fn report_delivery_status(
        &self,
        runner: &RunnerPrincipal,
        delivery: &str,
        input: DeliveryStatusInput,
        write: &WriteContext,
    ) -> Result<WebhookDelivery, ServiceError> {
        // A delivery of another pool (or organisation) is answered exactly like one that does
        // not exist, so a runner learns nothing about deliveries it may not touch.
        let not_found = || ServiceError::not_found("no such delivery");
        let delivery_id = parse_uuid(delivery).ok_or_else(not_found)?;
        let context = self
            .store
            .get_delivery(delivery_id)
            .await?
            .filter(|c| c.pool_id == runner.pool_id);
        // A disabled runner finishes what it was sent and touches nothing else of its pool. It
        // is told so, whatever the id names (another runner's, another pool's, none), so the
        // answer says nothing about the delivery.
        if runner.disabled && context.as_ref().and_then(|c| c.held_by) != Some(runner.runner_id) {
            return Err(ServiceError::Forbidden {
                reason: "the runner is disabled: it may report only on the deliveries sent to it"
                    .into(),
                details: Some(json!({ "reason": "runner_disabled" })),
            });
        }
        let context = context.ok_or_else(not_found)?;
        let from = context.delivery.status;
        let conflict = |message: String| ServiceError::Conflict {
            code: "invalid_transition",
            message,
            details: Some(json!({ "from": from.as_str(), "to": input.status.as_str() })),
        };
        if !context.command_status.is_open() {
            return Err(conflict(format!(
                "the command is {}; it takes no more reports",
                context.command_status
            )));
        }
        if !from.can_move_to(input.status) {
            return Err(conflict(format!(
                "a delivery cannot move from {from} to {}",
                input.status
            )));
        }
        let event = NewAuditEvent {
            organisation_id: context.organisation_id,
            workspace_id: Some(context.workspace_id),
            event_type: "webhook_delivery.status_reported",
            actor: write.actor(),
            target_kind: "webhook_delivery",
            target_id: delivery_id,
            correlation_id: write.correlation_id().to_string(),
            occurred_at: Self::now(),
            data: json!({
                "commandId": context.delivery.command_id,
                "from": from.as_str(),
                "to": input.status.as_str(),
                "exitCode": input.exit_code,
                "keyId": runner.key_id,
            }),
        };
        let transition = DeliveryTransition {
            delivery_id,
            from,
            to: input.status,
            detail: input.detail,
            exit_code: input.exit_code,
            at: Self::now(),
            event,
        };
        self.store
            .transition_delivery(write, &transition)
            .await?
            .ok_or_else(|| {
                conflict("the delivery or its command changed meanwhile; read it again".into())
            })
    }
}

impl Services {
    /// Fails every open command past its deadline (`timeoutSeconds` after submission) without
    /// a final report, with its delivery: each in a transaction of its own with one
    /// `runner_command.timed_out` event (actor `system`). Several replicas may sweep at once:
    /// the store applies each failure only from the state read here, so exactly one of them
    /// fails a command and writes its event.
    pub async fn time_out_overdue_commands(&self) -> Result<TimeoutSweep, ServiceError> {
        let now = Self::now();
        let overdue = self.store.overdue_commands(now, TIMEOUT_BATCH).await?;
        let more = overdue.len() as u64 >= u64::from(TIMEOUT_BATCH);
        let mut failed = 0;
        for command in overdue {
            let write = WriteContext::system();
            if let Some(timeout) = Self::timeout_of(&write, &command, now)
                && self.store.time_out_command(&write, &timeout).await?
            {
                tracing::info!(
                    command_id = %command.command_id,
                    timeout_seconds = command.timeout_seconds,
                    "runner command timed out"
                );
                failed += 1;
            }
        }
        Ok(TimeoutSweep { failed, more })
    }

    /// The failure of an overdue command, or `None` when its state machines allow none (it
    /// finished, or its delivery did, since the read).
    fn timeout_of(
        write: &WriteContext,
        command: &OverdueCommand,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<CommandTimeout> {
        let to = DeliveryStatus::Failed;
        if !command.status.is_open() || !command.delivery_status.can_move_to(to) {
            return None;
        }
        let detail = format!(
            "timed out: no final report within {} s of submission",
            command.timeout_seconds
        );
        let event = NewAuditEvent {
            organisation_id: command.organisation_id,
            workspace_id: Some(command.workspace_id),
            event_type: "runner_command.timed_out",
            actor: write.actor(),
            target_kind: "runner_command",
            target_id: command.command_id,
            correlation_id: write.correlation_id().to_string(),
            occurred_at: now,
            data: json!({
                "poolId": command.pool_id,
                "deliveryId": command.delivery_id,
                "from": command.status.as_str(),
                "to": to.command_status().as_str(),
                "deliveryFrom": command.delivery_status.as_str(),
                "timeoutSeconds": command.timeout_seconds,
                "deadlineAt": crate::domain::Timestamp::new(command.deadline_at),
                "reason": "timed out",
            }),
        };
        Some(CommandTimeout {
            command_id: command.command_id,
            from: command.status,
            delivery_from: command.delivery_status,
            to: to.command_status(),
            delivery_to: to,
            detail,
            at: now,
            event,
        })
    }
}
