//! Runner pools, runners and keys (shared by both SQL adapters; see the layout in
//! `storage/records/mod.rs`). Their commands and deliveries: `commands.rs`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::FromRow;
use uuid::Uuid;

use super::ListParam;
use crate::domain::{CommandStatus, NewAuditEvent, rules};
use crate::storage::records::dialect::{Conn, Dialect};
use crate::storage::records::rows::{POOL_COLUMNS, PoolRow, open_statuses, with_data};
use crate::storage::{
    DeletePool, DeletePoolOutcome, Runner, RunnerKey, RunnerKeyLookup, RunnerPool, RunnerStore,
    SealedRunnerSecrets, StoreError, WriteContext,
};

type SecretsRow = (Option<Vec<u8>>, Option<Vec<u8>>, Option<DateTime<Utc>>);

#[async_trait]
impl<S: Dialect> RunnerStore for S {
    async fn create_pool(
        &self,
        write: &WriteContext,
        pool: &RunnerPool,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query(
            "INSERT INTO runner_pools (id, workspace_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(pool.id)
        .bind(pool.workspace_id)
        .bind(&pool.name)
        .bind(pool.created_at)
        .execute(&mut *tx)
        .await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn list_pools(&self, workspace_id: Option<Uuid>) -> Result<Vec<RunnerPool>, StoreError> {
        let rows: Vec<PoolRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {POOL_COLUMNS} FROM runner_pools
             WHERE ($1 IS NULL OR workspace_id = $1) ORDER BY created_at, name"
        )))
        .bind(workspace_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn pools_page(
        &self,
        workspace_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<RunnerPool>, StoreError> {
        // Keyset on (created_at, id), as the admin API's other pages.
        let rows: Vec<PoolRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {POOL_COLUMNS} FROM runner_pools
             WHERE workspace_id = $1
               AND ($2 IS NULL OR (created_at, id) > (SELECT created_at, id FROM runner_pools WHERE id = $2))
             ORDER BY created_at, id LIMIT $3"
        )))
        .bind(workspace_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn get_pool(&self, pool_id: Uuid) -> Result<Option<RunnerPool>, StoreError> {
        let row: Option<PoolRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {POOL_COLUMNS} FROM runner_pools WHERE id = $1"
        )))
        .bind(pool_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(Into::into))
    }

    async fn create_runner(
        &self,
        write: &WriteContext,
        runner: &Runner,
        key: &RunnerKey,
        sealed_secret: &[u8],
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query(
            "INSERT INTO runners (id, pool_id, name, created_at, delivery_url, webhook_secret)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(runner.id)
        .bind(runner.pool_id)
        .bind(&runner.name)
        .bind(runner.created_at)
        .bind(&runner.delivery_url)
        .bind(sealed_secret)
        .execute(&mut *tx)
        .await?;
        insert_key::<S>(&mut tx, key).await?;
        if runner.delivery_url.is_some() {
            wake_waiting_deliveries::<S>(&mut tx, runner.id, runner.created_at).await?;
        }
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn set_runner_url(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        url: Option<&str>,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        // The pool before the runner, in the order a lease takes them.
        lock_pool_of::<S>(&mut tx, runner_id).await?;
        // A new URL is a fresh start: the failures and the breaker were the old address's.
        let updated = S::query(
            "UPDATE runners SET delivery_url = $2, consecutive_failures = 0, slow_streak = 0,
                 held_until = NULL
             WHERE id = $1",
        )
        .bind(runner_id)
        .bind(url)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if updated == 0 {
            return Ok(false);
        }
        if url.is_some() {
            wake_waiting_deliveries::<S>(&mut tx, runner_id, at).await?;
        }
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn get_runner(&self, runner_id: Uuid) -> Result<Option<Runner>, StoreError> {
        let row: Option<(Uuid, Uuid, String, DateTime<Utc>, Option<String>)> = S::query(
            "SELECT id, pool_id, name, created_at, delivery_url FROM runners WHERE id = $1",
        )
        .bind(runner_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(
            row.map(|(id, pool_id, name, created_at, delivery_url)| Runner {
                id,
                pool_id,
                name,
                created_at,
                delivery_url,
            }),
        )
    }

    async fn rotate_runner_secret(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        sealed: &[u8],
        previous_retires_at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        // Right-hand sides read the row as it was: the current secret becomes the previous one.
        let rotated = S::query(
            "UPDATE runners SET previous_webhook_secret = webhook_secret,
                 previous_retires_at = $3, webhook_secret = $2
             WHERE id = $1",
        )
        .bind(runner_id)
        .bind(sealed)
        .bind(previous_retires_at)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !rotated {
            return Ok(false);
        }
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn runner_secrets(
        &self,
        runner_id: Uuid,
    ) -> Result<Option<SealedRunnerSecrets>, StoreError> {
        let row: Option<SecretsRow> = S::query(
            "SELECT webhook_secret, previous_webhook_secret, previous_retires_at
             FROM runners WHERE id = $1",
        )
        .bind(runner_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(|(current, previous, retires)| SealedRunnerSecrets {
            current,
            previous: previous.zip(retires),
        }))
    }

    async fn add_runner_key(
        &self,
        write: &WriteContext,
        key: &RunnerKey,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        insert_key::<S>(&mut tx, key).await?;
        wake_waiting_deliveries::<S>(&mut tx, key.runner_id, key.created_at).await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn revoke_runner_key(
        &self,
        write: &WriteContext,
        runner_id: Uuid,
        key_id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        let updated = S::query(
            "UPDATE runner_keys SET revoked_at = $3
             WHERE id = $1 AND runner_id = $2 AND revoked_at IS NULL",
        )
        .bind(key_id)
        .bind(runner_id)
        .bind(at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if updated == 0 {
            return Ok(false);
        }
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn find_runner_key(&self, key_id: Uuid) -> Result<Option<RunnerKeyLookup>, StoreError> {
        #[derive(FromRow)]
        struct Row {
            id: Uuid,
            runner_id: Uuid,
            public_key: Vec<u8>,
            created_at: DateTime<Utc>,
            revoked_at: Option<DateTime<Utc>>,
            pool_id: Uuid,
            workspace_id: Uuid,
            organisation_id: Uuid,
            runner_disabled: bool,
        }
        // Every signed request's first read: through the request path's reads. A removed
        // runner's keys read as revoked at its removal, even one added in a race with it.
        let row: Option<Row> = self
            .read_optional(
                S::query(
                    "SELECT k.id, k.runner_id, k.public_key, k.created_at,
                            COALESCE(k.revoked_at, r.removed_at) AS revoked_at, r.pool_id,
                            p.workspace_id, w.organisation_id,
                            r.disabled_at IS NOT NULL AS runner_disabled
                     FROM runner_keys k JOIN runners r ON r.id = k.runner_id
                     JOIN runner_pools p ON p.id = r.pool_id
                     JOIN workspaces w ON w.id = p.workspace_id
                     WHERE k.id = $1",
                )
                .bind(key_id),
            )
            .await?;
        Ok(row.map(|r| RunnerKeyLookup {
            key: RunnerKey {
                id: r.id,
                runner_id: r.runner_id,
                public_key: r.public_key,
                created_at: r.created_at,
                revoked_at: r.revoked_at,
            },
            pool_id: r.pool_id,
            workspace_id: r.workspace_id,
            organisation_id: r.organisation_id,
            runner_disabled: r.runner_disabled,
        }))
    }

    async fn delete_pool(
        &self,
        write: &WriteContext,
        delete: &DeletePool,
    ) -> Result<DeletePoolOutcome, StoreError> {
        let mut tx = self.begin(write).await?;
        // Postgres: the pool's row lock orders this against submissions, which take it FOR
        // SHARE (SQLite: the write lock does), so no open command can be added between the
        // count (or the cancelling) and the delete.
        let pool: Option<PoolRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {POOL_COLUMNS} FROM runner_pools
             WHERE id = $1 AND workspace_id = $2 AND deleted_at IS NULL {for_update}",
            for_update = S::FOR_UPDATE
        )))
        .bind(delete.pool_id)
        .bind(delete.workspace_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(pool) = pool else {
            return Ok(DeletePoolOutcome::NotFound);
        };
        let outside = if delete.limited_to.is_empty() {
            0
        } else {
            let (outside,): (i64,) = S::query(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM runner_commands
                 WHERE pool_id = $1 AND status IN {}
                   AND (environment_id IS NULL OR NOT (environment_id {}))",
                open_statuses(),
                S::in_uuid_list("$2"),
            )))
            .bind(pool.id)
            .bind(ListParam(&delete.limited_to))
            .fetch_one(&mut *tx)
            .await?;
            outside
        };
        if !rules::pool_deletion_reaches(outside) {
            return Ok(DeletePoolOutcome::OutsideEnvironments {
                open: outside as u64,
            });
        }
        let cancelled = if delete.force {
            S::query(sqlx::AssertSqlSafe(format!(
                "UPDATE runner_commands SET status = $2, updated_at = $3
                 WHERE pool_id = $1 AND status IN {}",
                open_statuses()
            )))
            .bind(pool.id)
            .bind(CommandStatus::Cancelled.as_str())
            .bind(delete.at)
            .execute(&mut *tx)
            .await?
            .rows_affected()
        } else {
            let (open,): (i64,) = S::query(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM runner_commands WHERE pool_id = $1 AND status IN {}",
                open_statuses()
            )))
            .bind(pool.id)
            .fetch_one(&mut *tx)
            .await?;
            if rules::pool_is_busy(open) {
                return Ok(DeletePoolOutcome::Busy { open: open as u64 });
            }
            0
        };
        S::query("UPDATE runner_pools SET deleted_at = $2, deleted_reason = $3 WHERE id = $1")
            .bind(pool.id)
            .bind(delete.at)
            .bind(&delete.reason)
            .execute(&mut *tx)
            .await?;
        let event = with_data(&delete.event, "cancelledCommands", Value::from(cancelled));
        S::insert_event(&mut tx, &event).await?;
        self.commit(tx, write).await?;
        let mut pool = RunnerPool::from(pool);
        pool.deleted_at = Some(delete.at);
        Ok(DeletePoolOutcome::Deleted { pool, cancelled })
    }
}

async fn insert_key<S: Dialect>(conn: &mut Conn<S>, key: &RunnerKey) -> Result<(), StoreError> {
    S::query(
        "INSERT INTO runner_keys (id, runner_id, public_key, created_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(key.id)
    .bind(key.runner_id)
    .bind(&key.public_key)
    .bind(key.created_at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Locks the runner's pool (not the runner: a lease holding the pool shared updates the
/// runners it chose, so locking both here could wait in a cycle).
pub(super) async fn lock_pool_of<S: Dialect>(
    conn: &mut Conn<S>,
    runner_id: Uuid,
) -> Result<(), StoreError> {
    S::query(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM runner_pools WHERE id = (SELECT pool_id FROM runners WHERE id = $1)
         {for_update}",
        for_update = S::FOR_UPDATE
    )))
    .bind(runner_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Makes the deliveries of the runner's pool that wait for a runner due at `at`, if the runner
/// can now receive (a delivery URL and a live key). The pool's row is locked first: a lease
/// that found no runner holds it shared while it marks deliveries waiting, so one of the two
/// always sees the other.
pub(super) async fn wake_waiting_deliveries<S: Dialect>(
    conn: &mut Conn<S>,
    runner_id: Uuid,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    lock_pool_of::<S>(conn, runner_id).await?;
    S::query(sqlx::AssertSqlSafe(format!(
        "UPDATE webhook_deliveries SET next_attempt_at = $2, waiting_for_runner = $3
         WHERE waiting_for_runner AND status = 'pending'
           AND command_id IN (SELECT c.id FROM runner_commands c JOIN runners r
                              ON r.pool_id = c.pool_id
                              WHERE r.id = $1 AND c.status IN {})
           AND EXISTS (SELECT 1 FROM runners r WHERE r.id = $1 AND r.delivery_url IS NOT NULL)
           AND EXISTS (SELECT 1 FROM runner_keys k WHERE k.runner_id = $1 AND k.revoked_at IS NULL)",
        open_statuses()
    )))
    .bind(runner_id)
    .bind(at)
    .bind(false)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
