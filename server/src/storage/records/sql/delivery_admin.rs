//! Deliveries after the fact: a pool's deliveries, and resending one (shared by both SQL
//! adapters; what a resend may do is decided in `service/runner_admin.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use crate::domain::{CommandStatus, DeliveryStatus, NewAuditEvent};
use crate::storage::records::dialect::Dialect;
use crate::storage::records::rows::{open_statuses, parse_state};
use crate::storage::{
    DeliveryAdminStore, DeliveryFilter, DeliverySummary, ResendFailed, StoreError, WriteContext,
};

const SUMMARY_COLUMNS: &str = "d.id, d.command_id, c.workspace_id, w.organisation_id, c.pool_id,
    CASE WHEN p.deleted_at IS NULL THEN 0 ELSE 1 END AS pool_deleted, d.status,
    c.status AS command_status, c.timeout_seconds, d.attempts,
    COALESCE(d.webhook_id, d.id) AS webhook_id, d.resent_as, d.next_attempt_at,
    d.waiting_for_runner, d.detail, d.created_at, d.updated_at";

const SUMMARY_FROM: &str = "webhook_deliveries d JOIN runner_commands c ON c.id = d.command_id
    JOIN runner_pools p ON p.id = c.pool_id JOIN workspaces w ON w.id = c.workspace_id";

#[derive(FromRow)]
struct SummaryRow {
    id: Uuid,
    command_id: Uuid,
    workspace_id: Uuid,
    organisation_id: Uuid,
    pool_id: Uuid,
    pool_deleted: i32,
    status: String,
    command_status: String,
    timeout_seconds: i32,
    attempts: i32,
    webhook_id: Uuid,
    resent_as: Option<Uuid>,
    next_attempt_at: Option<DateTime<Utc>>,
    waiting_for_runner: bool,
    detail: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<SummaryRow> for DeliverySummary {
    type Error = StoreError;

    fn try_from(r: SummaryRow) -> Result<Self, StoreError> {
        Ok(DeliverySummary {
            id: r.id,
            command_id: r.command_id,
            workspace_id: r.workspace_id,
            organisation_id: r.organisation_id,
            pool_id: r.pool_id,
            pool_deleted: r.pool_deleted != 0,
            status: parse_state(&r.status, DeliveryStatus::parse)?,
            command_status: parse_state(&r.command_status, CommandStatus::parse)?,
            timeout_seconds: r.timeout_seconds,
            attempts: r.attempts,
            webhook_id: r.webhook_id,
            resent_as: r.resent_as,
            next_attempt_at: r.next_attempt_at,
            waiting_for_runner: r.waiting_for_runner,
            detail: r.detail,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[async_trait]
impl<S: Dialect> DeliveryAdminStore for S {
    async fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<DeliverySummary>, StoreError> {
        let rows: Vec<SummaryRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SUMMARY_COLUMNS} FROM {SUMMARY_FROM}
             WHERE c.pool_id = $1 AND ($2 IS NULL OR d.status = $2)
               AND ($3 IS NULL OR d.updated_at >= $3)
             ORDER BY d.updated_at DESC, d.id LIMIT $4"
        )))
        .bind(filter.pool_id)
        .bind(filter.status.map(DeliveryStatus::as_str))
        .bind(filter.since)
        .bind(i64::from(filter.limit))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn deliveries_page(
        &self,
        filter: &DeliveryFilter,
        after: Option<Uuid>,
    ) -> Result<Vec<DeliverySummary>, StoreError> {
        let rows: Vec<SummaryRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SUMMARY_COLUMNS} FROM {SUMMARY_FROM}
             WHERE c.pool_id = $1 AND ($2 IS NULL OR d.status = $2)
               AND ($3 IS NULL OR d.updated_at >= $3)
               AND ($5 IS NULL OR (d.created_at, d.id) <
                    (SELECT created_at, id FROM webhook_deliveries WHERE id = $5))
             ORDER BY d.created_at DESC, d.id DESC LIMIT $4"
        )))
        .bind(filter.pool_id)
        .bind(filter.status.map(DeliveryStatus::as_str))
        .bind(filter.since)
        .bind(i64::from(filter.limit))
        .bind(after)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn delivery_summary(
        &self,
        delivery_id: Uuid,
    ) -> Result<Option<DeliverySummary>, StoreError> {
        let row: Option<SummaryRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SUMMARY_COLUMNS} FROM {SUMMARY_FROM} WHERE d.id = $1"
        )))
        .bind(delivery_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn resend_pending(
        &self,
        write: &WriteContext,
        delivery_id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        // Due now, whatever the schedule said. Not while an attempt is in flight (leased, not
        // answered): its answer would set the schedule over this one.
        let due = S::query(sqlx::AssertSqlSafe(format!(
            "UPDATE webhook_deliveries SET next_attempt_at = $2, waiting_for_runner = $3
             WHERE id = $1 AND status = 'pending'
               AND command_id IN (SELECT id FROM runner_commands WHERE status IN {})
               AND NOT (next_attempt_at IS NOT NULL AND next_attempt_at > $2
                        AND EXISTS (SELECT 1 FROM webhook_attempts a
                                    WHERE a.delivery_id = webhook_deliveries.id
                                      AND a.number = webhook_deliveries.attempts
                                      AND a.finished_at IS NULL AND a.error IS NULL))",
            open_statuses()
        )))
        .bind(delivery_id)
        .bind(at)
        .bind(false)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        if !due {
            return Ok(false);
        }
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn resend_failed(
        &self,
        write: &WriteContext,
        r: &ResendFailed,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        // Shares the pool with submissions, so a pool deleted meanwhile gets no new command.
        let pool: Option<(Uuid,)> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT p.id FROM runner_pools p
             WHERE p.id = (SELECT c.pool_id FROM webhook_deliveries d
                           JOIN runner_commands c ON c.id = d.command_id WHERE d.id = $1)
               AND p.deleted_at IS NULL {for_share}",
            for_share = S::FOR_SHARE
        )))
        .bind(r.delivery_id)
        .fetch_optional(&mut *tx)
        .await?;
        if pool.is_none() {
            return Ok(false);
        }
        // Claims the failed delivery: at most one resend of it, however many race.
        let claimed = S::query(
            "UPDATE webhook_deliveries SET resent_as = $2
             WHERE id = $1 AND status = 'failed' AND resent_as IS NULL",
        )
        .bind(r.delivery_id)
        .bind(r.new_delivery_id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        if !claimed {
            return Ok(false);
        }
        S::query(
            "INSERT INTO runner_commands (id, workspace_id, pool_id, environment_id, command, args,
                 timeout_seconds, status, submitted_by, created_at, updated_at, deadline_at)
             SELECT $1, c.workspace_id, c.pool_id, c.environment_id, c.command, c.args,
                    c.timeout_seconds, $2, c.submitted_by, $3, $3, $4
             FROM runner_commands c JOIN webhook_deliveries d ON d.command_id = c.id
             WHERE d.id = $5",
        )
        .bind(r.new_command_id)
        .bind(CommandStatus::Queued.as_str())
        .bind(r.at)
        .bind(r.deadline_at)
        .bind(r.delivery_id)
        .execute(&mut *tx)
        .await?;
        S::query(
            "INSERT INTO webhook_deliveries
                 (id, command_id, status, created_at, updated_at, next_attempt_at, webhook_id)
             VALUES ($1, $2, $3, $4, $4, $4, $5)",
        )
        .bind(r.new_delivery_id)
        .bind(r.new_command_id)
        .bind(DeliveryStatus::Pending.as_str())
        .bind(r.at)
        .bind(r.webhook_id)
        .execute(&mut *tx)
        .await?;
        S::insert_events(&mut tx, &r.events).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }
}
