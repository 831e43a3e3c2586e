//! Runners after the fact: listing a pool's runners with their health, disabling, enabling and
//! removing one (shared by both SQL adapters; the rules are in `service/runner_admin.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::FromRow;
use uuid::Uuid;

use super::runners::{lock_pool_of, wake_waiting_deliveries};
use crate::domain::NewAuditEvent;
use crate::storage::records::dialect::Dialect;
use crate::storage::records::rows::{open_statuses, with_data};
use crate::storage::{
    RemovedRunner, RunnerAdminStore, RunnerHealth, RunnerKeyStatus, RunnerStatus, StillFailing,
    StoreError, WriteContext,
};

#[derive(FromRow)]
struct StatusRow {
    id: Uuid,
    pool_id: Uuid,
    name: String,
    delivery_url: Option<String>,
    created_at: DateTime<Utc>,
    consecutive_failures: i32,
    failing_since: Option<DateTime<Utc>>,
    held_until: Option<DateTime<Utc>>,
    disabled_at: Option<DateTime<Utc>>,
    disabled_reason: Option<String>,
    removed_at: Option<DateTime<Utc>>,
    last_success_at: Option<DateTime<Utc>>,
    last_failure_at: Option<DateTime<Utc>>,
}

#[async_trait]
impl<S: Dialect> RunnerAdminStore for S {
    async fn list_runners(&self, pool_id: Uuid) -> Result<Vec<RunnerStatus>, StoreError> {
        self.runners_page(pool_id, None, u32::MAX).await
    }

    async fn runners_page(
        &self,
        pool_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<RunnerStatus>, StoreError> {
        // The last success and failure come from the attempts (an admin's read, not the
        // dispatcher's): a healthy runner's row is not rewritten on every success. Runners and
        // keys in one snapshot, so a runner is never shown beside keys of another moment.
        // Keyset on (created_at, id), as the admin API's other pages.
        let mut tx = self.begin_snapshot().await?;
        let rows: Vec<StatusRow> = S::query(
            "SELECT r.id, r.pool_id, r.name, r.delivery_url, r.created_at,
                    r.consecutive_failures, r.failing_since, r.held_until, r.disabled_at,
                    r.disabled_reason, r.removed_at,
                    (SELECT max(a.finished_at) FROM webhook_attempts a
                     WHERE a.runner_id = r.id AND a.finished_at IS NOT NULL
                       AND a.error IS NULL) AS last_success_at,
                    (SELECT max(a.finished_at) FROM webhook_attempts a
                     WHERE a.runner_id = r.id AND a.finished_at IS NOT NULL
                       AND a.error IS NOT NULL) AS last_failure_at
             FROM runners r WHERE r.pool_id = $1
               AND ($2 IS NULL OR (r.created_at, r.id) > (SELECT created_at, id FROM runners WHERE id = $2))
             ORDER BY r.created_at, r.id LIMIT $3",
        )
        .bind(pool_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        // The keys of this page's runners only: those between the cursor and its last runner.
        let keys: Vec<(Uuid, Uuid, DateTime<Utc>, Option<DateTime<Utc>>)> = match rows.last() {
            None => Vec::new(),
            Some(last) => {
                S::query(
                    "SELECT k.id, k.runner_id, k.created_at, k.revoked_at FROM runner_keys k
                     JOIN runners r ON r.id = k.runner_id
                     WHERE r.pool_id = $1
                       AND ($2 IS NULL OR (r.created_at, r.id) > (SELECT created_at, id FROM runners WHERE id = $2))
                       AND (r.created_at, r.id) <= (SELECT created_at, id FROM runners WHERE id = $3)
                     ORDER BY k.created_at, k.id",
                )
                .bind(pool_id)
                .bind(after)
                .bind(last.id)
                .fetch_all(&mut *tx)
                .await?
            }
        };
        tx.commit().await.map_err(S::map_err)?;
        Ok(rows
            .into_iter()
            .map(|r| RunnerStatus {
                keys: keys
                    .iter()
                    .filter(|(_, runner, _, _)| *runner == r.id)
                    .map(|(id, _, created_at, revoked_at)| RunnerKeyStatus {
                        id: *id,
                        created_at: *created_at,
                        revoked_at: *revoked_at,
                    })
                    .collect(),
                id: r.id,
                pool_id: r.pool_id,
                name: r.name,
                delivery_url: r.delivery_url,
                created_at: r.created_at,
                consecutive_failures: r.consecutive_failures,
                failing_since: r.failing_since,
                held_until: r.held_until,
                disabled_at: r.disabled_at,
                disabled_reason: r.disabled_reason,
                removed_at: r.removed_at,
                last_success_at: r.last_success_at,
                last_failure_at: r.last_failure_at,
            })
            .collect())
    }

    async fn runner_health(&self, runner_id: Uuid) -> Result<Option<RunnerHealth>, StoreError> {
        type Row = (
            i32,
            Option<DateTime<Utc>>,
            Option<DateTime<Utc>>,
            Option<DateTime<Utc>>,
        );
        let row: Option<Row> = S::query(
            "SELECT consecutive_failures, failing_since, disabled_at, removed_at
             FROM runners WHERE id = $1",
        )
        .bind(runner_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(
            row.map(|(failures, since, disabled, removed)| RunnerHealth {
                consecutive_failures: failures,
                failing_since: since,
                disabled: disabled.is_some(),
                removed: removed.is_some(),
            }),
        )
    }

    async fn disable_runner(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        reason: &str,
        still_failing: Option<StillFailing>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        // The pool before the runner, in the order a lease takes them.
        lock_pool_of::<S>(&mut tx, runner_id).await?;
        let disabled = S::query(
            "UPDATE runners SET disabled_at = $2, disabled_reason = $3
             WHERE id = $1 AND disabled_at IS NULL AND removed_at IS NULL
               AND consecutive_failures >= $4
               AND (CAST($5 AS BIGINT) = 0 OR failing_since <= $6)",
        )
        .bind(runner_id)
        .bind(event.occurred_at)
        .bind(reason)
        .bind(still_failing.map_or(0, |f| f.failures))
        .bind(i64::from(still_failing.is_some()))
        .bind(still_failing.map_or(event.occurred_at, |f| f.failing_since_at_most))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        if !disabled {
            return Ok(false);
        }
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn enable_runner(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        lock_pool_of::<S>(&mut tx, runner_id).await?;
        // Back with a clean slate: the failures and the breaker were what disabled it.
        let enabled = S::query(
            "UPDATE runners SET disabled_at = NULL, disabled_reason = NULL,
                 consecutive_failures = 0, failing_since = NULL, slow_streak = 0,
                 held_until = NULL
             WHERE id = $1 AND disabled_at IS NOT NULL AND removed_at IS NULL",
        )
        .bind(runner_id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        if !enabled {
            return Ok(false);
        }
        wake_waiting_deliveries::<S>(&mut tx, runner_id, at).await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn remove_runner(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<Option<RemovedRunner>, StoreError> {
        let mut tx = self.begin(write).await?;
        // The pool first: a lease holds it shared while it chooses among the pool's runners,
        // so no lease chooses this runner after the commit.
        lock_pool_of::<S>(&mut tx, runner_id).await?;
        let removed =
            S::query("UPDATE runners SET removed_at = $2 WHERE id = $1 AND removed_at IS NULL")
                .bind(runner_id)
                .bind(at)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                > 0;
        if !removed {
            return Ok(None);
        }
        let keys_revoked = S::query(
            "UPDATE runner_keys SET revoked_at = $2 WHERE runner_id = $1 AND revoked_at IS NULL",
        )
        .bind(runner_id)
        .bind(at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        // Still `pending` (in flight, acknowledged but never reported on, or waiting for a
        // retry) with its last attempt to this runner: due now, so the next attempt, with the
        // same webhook-id, goes to another runner of the pool (or waits for one).
        let deliveries_moved = S::query(sqlx::AssertSqlSafe(format!(
            "UPDATE webhook_deliveries SET next_attempt_at = $2, waiting_for_runner = $3
             WHERE status = 'pending'
               AND EXISTS (SELECT 1 FROM webhook_attempts a
                           WHERE a.delivery_id = webhook_deliveries.id
                             AND a.number = webhook_deliveries.attempts AND a.runner_id = $1)
               AND command_id IN (SELECT id FROM runner_commands
                                  WHERE status IN {})",
            open_statuses()
        )))
        .bind(runner_id)
        .bind(at)
        .bind(false)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let event = with_data(event, "keysRevoked", Value::from(keys_revoked));
        let event = with_data(&event, "deliveriesMoved", Value::from(deliveries_moved));
        S::insert_event(&mut tx, &event).await?;
        self.commit(tx, write).await?;
        Ok(Some(RemovedRunner {
            keys_revoked,
            deliveries_moved,
        }))
    }
}
