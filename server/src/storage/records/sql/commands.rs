//! Runner commands and their deliveries (shared by both SQL adapters, and compiled as a child
//! of each adapter's `runners.rs`; see the layout in `storage/records/mod.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use crate::domain::{CommandStatus, DeliveryStatus, NewAuditEvent, rules};
use crate::storage::records::dialect::Dialect;
use crate::storage::records::rows::{DeliveryRow, open_statuses, parse_state};
use crate::storage::{
    CommandStore, CommandTimeout, DeliveryContext, DeliveryTransition, OverdueCommand,
    RunnerCommand, StoreError, SubmitOutcome, WebhookDelivery, WriteContext,
};

#[async_trait]
impl<S: Dialect> CommandStore for S {
    async fn submit_command(
        &self,
        write: &WriteContext,
        command: &RunnerCommand,
        delivery: &WebhookDelivery,
        event: &NewAuditEvent,
    ) -> Result<SubmitOutcome, StoreError> {
        let mut tx = self.begin(write).await?;
        let pool: Option<(Option<DateTime<Utc>>,)> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT deleted_at FROM runner_pools WHERE id = $1 AND workspace_id = $2 {for_share}",
            for_share = S::FOR_SHARE
        )))
        .bind(command.pool_id)
        .bind(command.workspace_id)
        .fetch_optional(&mut *tx)
        .await?;
        match pool {
            None => return Ok(SubmitOutcome::PoolNotFound),
            Some((Some(_),)) => return Ok(SubmitOutcome::PoolDeleted),
            Some((None,)) => {}
        }
        S::query(
            "INSERT INTO runner_commands (id, workspace_id, pool_id, environment_id, command, args,
                 timeout_seconds, status, submitted_by, created_at, updated_at, deadline_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11)",
        )
        .bind(command.id)
        .bind(command.workspace_id)
        .bind(command.pool_id)
        .bind(command.environment_id)
        .bind(&command.command)
        .bind(sqlx::types::Json(&command.args))
        .bind(command.timeout_seconds)
        .bind(command.status.as_str())
        .bind(command.submitted_by)
        .bind(command.created_at)
        .bind(command.deadline_at)
        .execute(&mut *tx)
        .await?;
        S::query(
            "INSERT INTO webhook_deliveries
                 (id, command_id, status, created_at, updated_at, next_attempt_at)
             VALUES ($1, $2, $3, $4, $4, $4)",
        )
        .bind(delivery.id)
        .bind(delivery.command_id)
        .bind(delivery.status.as_str())
        .bind(delivery.created_at)
        .execute(&mut *tx)
        .await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(SubmitOutcome::Created)
    }

    async fn get_delivery(&self, delivery_id: Uuid) -> Result<Option<DeliveryContext>, StoreError> {
        #[derive(FromRow)]
        struct Row {
            #[sqlx(flatten)]
            delivery: DeliveryRow,
            command_status: String,
            pool_id: Uuid,
            workspace_id: Uuid,
            organisation_id: Uuid,
            held_by: Option<Uuid>,
        }
        let row: Option<Row> = self
            .read_optional(
                S::query(
                    "SELECT d.id, d.command_id, d.status, d.detail, d.exit_code, d.created_at,
                            d.updated_at, c.status AS command_status, c.pool_id, c.workspace_id,
                            w.organisation_id,
                            (SELECT a.runner_id FROM webhook_attempts a WHERE a.delivery_id = d.id
                             ORDER BY a.number DESC LIMIT 1) AS held_by
                     FROM webhook_deliveries d JOIN runner_commands c ON c.id = d.command_id
                     JOIN workspaces w ON w.id = c.workspace_id
                     WHERE d.id = $1",
                )
                .bind(delivery_id),
            )
            .await?;
        row.map(|r| {
            Ok(DeliveryContext {
                delivery: r.delivery.try_into()?,
                command_status: parse_state(&r.command_status, CommandStatus::parse)?,
                pool_id: r.pool_id,
                workspace_id: r.workspace_id,
                organisation_id: r.organisation_id,
                held_by: r.held_by,
            })
        })
        .transpose()
    }

    async fn transition_delivery(
        &self,
        write: &WriteContext,
        t: &DeliveryTransition,
    ) -> Result<Option<WebhookDelivery>, StoreError> {
        if let Some(batched) = self.batch_transition_delivery(write, t).await {
            return batched?.map(TryInto::try_into).transpose();
        }
        let mut tx = self.begin(write).await?;
        // The delivery and its command under their locks (the delivery first, as the timeout
        // sweep takes them), so the rule sees the state the writes below apply to.
        let state: Option<(String, String)> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT d.status, c.status FROM webhook_deliveries d
             JOIN runner_commands c ON c.id = d.command_id WHERE d.id = $1 {for_update}",
            for_update = S::FOR_UPDATE
        )))
        .bind(t.delivery_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((delivery, command)) = state else {
            return Ok(None);
        };
        if !rules::report_applies(
            t.from,
            parse_state(&delivery, DeliveryStatus::parse)?,
            parse_state(&command, CommandStatus::parse)?,
        ) {
            return Ok(None);
        }
        let row: DeliveryRow = S::query(
            "UPDATE webhook_deliveries SET status = $2, detail = COALESCE($3, detail),
                 exit_code = COALESCE($4, exit_code), updated_at = $5, next_attempt_at = NULL
             WHERE id = $1
             RETURNING id, command_id, status, detail, exit_code, created_at, updated_at",
        )
        .bind(t.delivery_id)
        .bind(t.to.as_str())
        .bind(&t.detail)
        .bind(t.exit_code)
        .bind(t.at)
        .fetch_one(&mut *tx)
        .await?;
        S::query("UPDATE runner_commands SET status = $2, updated_at = $3 WHERE id = $1")
            .bind(row.command_id)
            .bind(t.to.command_status().as_str())
            .bind(t.at)
            .execute(&mut *tx)
            .await?;
        S::insert_event(&mut tx, &t.event).await?;
        self.commit(tx, write).await?;
        row.try_into().map(Some)
    }

    async fn overdue_commands(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<OverdueCommand>, StoreError> {
        #[derive(FromRow)]
        struct Row {
            command_id: Uuid,
            workspace_id: Uuid,
            organisation_id: Uuid,
            pool_id: Uuid,
            delivery_id: Uuid,
            status: String,
            delivery_status: String,
            timeout_seconds: i32,
            deadline_at: DateTime<Utc>,
        }
        // Through the partial index on open commands' deadlines.
        let rows: Vec<Row> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT c.id AS command_id, c.workspace_id, w.organisation_id, c.pool_id,
                    d.id AS delivery_id, c.status, d.status AS delivery_status,
                    c.timeout_seconds, c.deadline_at
             FROM runner_commands c JOIN webhook_deliveries d ON d.command_id = c.id
             JOIN workspaces w ON w.id = c.workspace_id
             WHERE c.status IN {} AND c.deadline_at <= $1
             ORDER BY c.deadline_at LIMIT $2",
            open_statuses()
        )))
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(OverdueCommand {
                    command_id: r.command_id,
                    workspace_id: r.workspace_id,
                    organisation_id: r.organisation_id,
                    pool_id: r.pool_id,
                    delivery_id: r.delivery_id,
                    status: parse_state(&r.status, CommandStatus::parse)?,
                    delivery_status: parse_state(&r.delivery_status, DeliveryStatus::parse)?,
                    timeout_seconds: r.timeout_seconds,
                    deadline_at: r.deadline_at,
                })
            })
            .collect()
    }

    async fn time_out_command(
        &self,
        write: &WriteContext,
        t: &CommandTimeout,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        // The delivery first, then the command, as a report moves them: the same lock order, so
        // a report racing the sweep waits instead of deadlocking. Each UPDATE applies only from
        // the state read; on Postgres a second replica's UPDATE waits for the first's commit,
        // then finds the state changed and touches nothing.
        let delivery = S::query(
            "UPDATE webhook_deliveries SET status = $3, detail = $4, updated_at = $5,
                 next_attempt_at = NULL
             WHERE command_id = $1 AND status = $2",
        )
        .bind(t.command_id)
        .bind(t.delivery_from.as_str())
        .bind(t.delivery_to.as_str())
        .bind(&t.detail)
        .bind(t.at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if delivery == 0 {
            return Ok(false);
        }
        let command = S::query(
            "UPDATE runner_commands SET status = $3, updated_at = $4
             WHERE id = $1 AND status = $2 AND deadline_at <= $4",
        )
        .bind(t.command_id)
        .bind(t.from.as_str())
        .bind(t.to.as_str())
        .bind(t.at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if command == 0 {
            return Ok(false);
        }
        S::insert_event(&mut tx, &t.event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }
}
