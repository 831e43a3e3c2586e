//! The Postgres adapter of [`OperationsStore`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::FromRow;
use uuid::Uuid;

use super::StoreError;
use super::operations::*;
use super::postgres::{PostgresStore, insert_event, map_err};
use super::rows::*;
use crate::domain::{CommandStatus, NewAuditEvent, ReportReason, ReviewStatus, RevisionState};

const REVISION_COLUMNS: &str = "r.id, r.workflow_id, w.workspace_id, r.number, r.state,
    r.requested_by, r.requested_at, r.request_comment, r.created_at";

#[derive(FromRow)]
struct ReviewRow {
    id: Uuid,
    plugin_id: Uuid,
    author_id: Uuid,
    organisation_id: Uuid,
    rating: i16,
    title: String,
    body: String,
    status: String,
    reasons: Vec<String>,
    labels: Vec<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<ReviewRow> for Review {
    type Error = StoreError;
    fn try_from(r: ReviewRow) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.id,
            plugin_id: r.plugin_id,
            author_id: r.author_id,
            organisation_id: r.organisation_id,
            rating: u8::try_from(r.rating).unwrap_or(0),
            title: r.title,
            body: r.body,
            status: parse_state(&r.status, ReviewStatus::parse)?,
            reasons: r.reasons,
            labels: r.labels,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

const REVIEW_COLUMNS: &str = "id, plugin_id, author_id, organisation_id, rating, title, body,
    status, reasons, labels, created_at, updated_at";

#[async_trait]
impl OperationsStore for PostgresStore {
    async fn create_pool(
        &self,
        pool: &RunnerPool,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        sqlx::query(
            "INSERT INTO runner_pools (id, workspace_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(pool.id)
        .bind(pool.workspace_id)
        .bind(&pool.name)
        .bind(pool.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn list_pools(&self, workspace_id: Option<Uuid>) -> Result<Vec<RunnerPool>, StoreError> {
        let rows: Vec<PoolRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {POOL_COLUMNS} FROM runner_pools
             WHERE ($1::uuid IS NULL OR workspace_id = $1) ORDER BY created_at, name"
        )))
        .bind(workspace_id)
        .fetch_all(self.pool())
        .await
        .map_err(map_err)?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn get_pool(&self, pool_id: Uuid) -> Result<Option<RunnerPool>, StoreError> {
        let row: Option<PoolRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {POOL_COLUMNS} FROM runner_pools WHERE id = $1"
        )))
        .bind(pool_id)
        .fetch_optional(self.pool())
        .await
        .map_err(map_err)?;
        Ok(row.map(Into::into))
    }

    async fn create_runner(
        &self,
        runner: &Runner,
        key: &RunnerKey,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        sqlx::query("INSERT INTO runners (id, pool_id, name, created_at) VALUES ($1, $2, $3, $4)")
            .bind(runner.id)
            .bind(runner.pool_id)
            .bind(&runner.name)
            .bind(runner.created_at)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        insert_key(&mut tx, key).await?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn get_runner(&self, runner_id: Uuid) -> Result<Option<Runner>, StoreError> {
        let row: Option<(Uuid, Uuid, String, DateTime<Utc>)> =
            sqlx::query_as("SELECT id, pool_id, name, created_at FROM runners WHERE id = $1")
                .bind(runner_id)
                .fetch_optional(self.pool())
                .await
                .map_err(map_err)?;
        Ok(row.map(|(id, pool_id, name, created_at)| Runner {
            id,
            pool_id,
            name,
            created_at,
        }))
    }

    async fn add_runner_key(
        &self,
        key: &RunnerKey,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        insert_key(&mut tx, key).await?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn revoke_runner_key(
        &self,
        runner_id: Uuid,
        key_id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        let updated = sqlx::query(
            "UPDATE runner_keys SET revoked_at = $3
             WHERE id = $1 AND runner_id = $2 AND revoked_at IS NULL",
        )
        .bind(key_id)
        .bind(runner_id)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if updated == 0 {
            return Ok(false);
        }
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)?;
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
        }
        let row: Option<Row> = sqlx::query_as(
            "SELECT k.id, k.runner_id, k.public_key, k.created_at, k.revoked_at, r.pool_id,
                    p.workspace_id, w.organisation_id
             FROM runner_keys k JOIN runners r ON r.id = k.runner_id
             JOIN runner_pools p ON p.id = r.pool_id JOIN workspaces w ON w.id = p.workspace_id
             WHERE k.id = $1",
        )
        .bind(key_id)
        .fetch_optional(self.pool())
        .await
        .map_err(map_err)?;
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
        }))
    }

    async fn delete_pool(&self, delete: &DeletePool) -> Result<DeletePoolOutcome, StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        // The pool's row lock orders this against submissions, which take it FOR SHARE.
        let pool: Option<PoolRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {POOL_COLUMNS} FROM runner_pools
             WHERE id = $1 AND workspace_id = $2 AND deleted_at IS NULL FOR UPDATE"
        )))
        .bind(delete.pool_id)
        .bind(delete.workspace_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some(pool) = pool else {
            return Ok(DeletePoolOutcome::NotFound);
        };
        let open: Vec<&str> = CommandStatus::OPEN.iter().map(|s| s.as_str()).collect();
        let cancelled = if delete.force {
            sqlx::query(
                "UPDATE runner_commands SET status = $3, updated_at = $4
                 WHERE pool_id = $1 AND status = ANY($2)",
            )
            .bind(pool.id)
            .bind(&open)
            .bind(CommandStatus::Cancelled.as_str())
            .bind(delete.at)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected()
        } else {
            let (busy,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM runner_commands WHERE pool_id = $1 AND status = ANY($2)",
            )
            .bind(pool.id)
            .bind(&open)
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
            if busy > 0 {
                return Ok(DeletePoolOutcome::Busy { open: busy as u64 });
            }
            0
        };
        sqlx::query("UPDATE runner_pools SET deleted_at = $2, deleted_reason = $3 WHERE id = $1")
            .bind(pool.id)
            .bind(delete.at)
            .bind(&delete.reason)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let event = with_data(&delete.event, "cancelledCommands", Value::from(cancelled));
        insert_event(&mut tx, &event).await?;
        tx.commit().await.map_err(map_err)?;
        let mut pool = RunnerPool::from(pool);
        pool.deleted_at = Some(delete.at);
        Ok(DeletePoolOutcome::Deleted { pool, cancelled })
    }

    async fn submit_command(
        &self,
        command: &RunnerCommand,
        delivery: &WebhookDelivery,
        event: &NewAuditEvent,
    ) -> Result<SubmitOutcome, StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        let pool: Option<(Option<DateTime<Utc>>,)> = sqlx::query_as(
            "SELECT deleted_at FROM runner_pools WHERE id = $1 AND workspace_id = $2 FOR SHARE",
        )
        .bind(command.pool_id)
        .bind(command.workspace_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        match pool {
            None => return Ok(SubmitOutcome::PoolNotFound),
            Some((Some(_),)) => return Ok(SubmitOutcome::PoolDeleted),
            Some((None,)) => {}
        }
        sqlx::query(
            "INSERT INTO runner_commands (id, workspace_id, pool_id, environment_id, command, args,
                 timeout_seconds, status, submitted_by, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)",
        )
        .bind(command.id)
        .bind(command.workspace_id)
        .bind(command.pool_id)
        .bind(command.environment_id)
        .bind(&command.command)
        .bind(serde_json::to_value(&command.args).unwrap_or(Value::Null))
        .bind(command.timeout_seconds)
        .bind(command.status.as_str())
        .bind(command.submitted_by)
        .bind(command.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, command_id, status, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $4)",
        )
        .bind(delivery.id)
        .bind(delivery.command_id)
        .bind(delivery.status.as_str())
        .bind(delivery.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)?;
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
        }
        let row: Option<Row> = sqlx::query_as(
            "SELECT d.id, d.command_id, d.status, d.detail, d.exit_code, d.created_at, d.updated_at,
                    c.status AS command_status, c.pool_id, c.workspace_id, w.organisation_id
             FROM webhook_deliveries d JOIN runner_commands c ON c.id = d.command_id
             JOIN workspaces w ON w.id = c.workspace_id
             WHERE d.id = $1",
        )
        .bind(delivery_id)
        .fetch_optional(self.pool())
        .await
        .map_err(map_err)?;
        row.map(|r| {
            Ok(DeliveryContext {
                delivery: r.delivery.try_into()?,
                command_status: parse_state(&r.command_status, CommandStatus::parse)?,
                pool_id: r.pool_id,
                workspace_id: r.workspace_id,
                organisation_id: r.organisation_id,
            })
        })
        .transpose()
    }

    async fn transition_delivery(
        &self,
        t: &DeliveryTransition,
    ) -> Result<Option<WebhookDelivery>, StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        let row: Option<DeliveryRow> = sqlx::query_as(
            "UPDATE webhook_deliveries SET status = $3, detail = COALESCE($4, detail),
                 exit_code = COALESCE($5, exit_code), updated_at = $6
             WHERE id = $1 AND status = $2
             RETURNING id, command_id, status, detail, exit_code, created_at, updated_at",
        )
        .bind(t.delivery_id)
        .bind(t.from.as_str())
        .bind(t.to.as_str())
        .bind(&t.detail)
        .bind(t.exit_code)
        .bind(t.at)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let open: Vec<&str> = CommandStatus::OPEN.iter().map(|s| s.as_str()).collect();
        // A cancelled (or otherwise finished) command takes no more reports.
        let moved = sqlx::query(
            "UPDATE runner_commands SET status = $2, updated_at = $3
             WHERE id = $1 AND status = ANY($4)",
        )
        .bind(row.command_id)
        .bind(t.to.command_status().as_str())
        .bind(t.at)
        .bind(&open)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if moved == 0 {
            return Ok(None);
        }
        insert_event(&mut tx, &t.event).await?;
        tx.commit().await.map_err(map_err)?;
        row.try_into().map(Some)
    }

    async fn create_workflow(
        &self,
        workflow: &Workflow,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        sqlx::query(
            "INSERT INTO workflows (id, workspace_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(workflow.id)
        .bind(workflow.workspace_id)
        .bind(&workflow.name)
        .bind(workflow.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn list_workflows(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<Workflow>, StoreError> {
        let rows: Vec<WorkflowRow> = sqlx::query_as(
            "SELECT id, workspace_id, name, created_at FROM workflows
             WHERE ($1::uuid IS NULL OR workspace_id = $1) ORDER BY created_at, name",
        )
        .bind(workspace_id)
        .fetch_all(self.pool())
        .await
        .map_err(map_err)?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn get_workflow(&self, workflow_id: Uuid) -> Result<Option<Workflow>, StoreError> {
        let row: Option<WorkflowRow> = sqlx::query_as(
            "SELECT id, workspace_id, name, created_at FROM workflows WHERE id = $1",
        )
        .bind(workflow_id)
        .fetch_optional(self.pool())
        .await
        .map_err(map_err)?;
        Ok(row.map(Into::into))
    }

    async fn create_revision(
        &self,
        workflow: &Workflow,
        id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<WorkflowRevision, StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        // The workflow's row lock serialises numbering.
        sqlx::query("SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE")
            .bind(workflow.id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let (number,): (i32,) = sqlx::query_as(
            "INSERT INTO workflow_revisions (id, workflow_id, number, state, created_at)
             SELECT $1, $2, COALESCE(max(number), 0) + 1, $3, $4
             FROM workflow_revisions WHERE workflow_id = $2
             RETURNING number",
        )
        .bind(id)
        .bind(workflow.id)
        .bind(RevisionState::Draft.as_str())
        .bind(at)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        let event = with_data(event, "number", Value::from(number));
        insert_event(&mut tx, &event).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(WorkflowRevision {
            id,
            workflow_id: workflow.id,
            workspace_id: workflow.workspace_id,
            number,
            state: RevisionState::Draft,
            requested_by: None,
            requested_at: None,
            comment: None,
            created_at: at,
        })
    }

    async fn get_revision(
        &self,
        revision_id: Uuid,
    ) -> Result<Option<WorkflowRevision>, StoreError> {
        let row: Option<RevisionRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {REVISION_COLUMNS} FROM workflow_revisions r
             JOIN workflows w ON w.id = r.workflow_id WHERE r.id = $1"
        )))
        .bind(revision_id)
        .fetch_optional(self.pool())
        .await
        .map_err(map_err)?;
        row.map(TryInto::try_into).transpose()
    }

    async fn request_approval(
        &self,
        revision_id: Uuid,
        by: Uuid,
        comment: Option<&str>,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<Option<WorkflowRevision>, StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        let row: Option<RevisionRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "UPDATE workflow_revisions r SET state = $2, requested_by = $3, requested_at = $4,
                 request_comment = $5
             FROM workflows w
             WHERE r.id = $1 AND w.id = r.workflow_id AND r.state = $6
             RETURNING {REVISION_COLUMNS}"
        )))
        .bind(revision_id)
        .bind(RevisionState::PendingApproval.as_str())
        .bind(by)
        .bind(at)
        .bind(comment)
        .bind(RevisionState::Draft.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some(row) = row else {
            return Ok(None);
        };
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)?;
        row.try_into().map(Some)
    }

    async fn create_plugin(
        &self,
        plugin: &Plugin,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        sqlx::query(
            "INSERT INTO plugins (id, organisation_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(plugin.id)
        .bind(plugin.organisation_id)
        .bind(&plugin.name)
        .bind(plugin.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn list_plugins(&self) -> Result<Vec<Plugin>, StoreError> {
        let rows: Vec<PluginRow> = sqlx::query_as(
            "SELECT id, organisation_id, name, created_at FROM plugins ORDER BY name",
        )
        .fetch_all(self.pool())
        .await
        .map_err(map_err)?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn get_plugin(&self, plugin_id: Uuid) -> Result<Option<Plugin>, StoreError> {
        let row: Option<PluginRow> = sqlx::query_as(
            "SELECT id, organisation_id, name, created_at FROM plugins WHERE id = $1",
        )
        .bind(plugin_id)
        .fetch_optional(self.pool())
        .await
        .map_err(map_err)?;
        Ok(row.map(Into::into))
    }

    async fn find_review(&self, review_id: Uuid) -> Result<Option<Review>, StoreError> {
        let row: Option<ReviewRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM plugin_reviews WHERE id = $1"
        )))
        .bind(review_id)
        .fetch_optional(self.pool())
        .await
        .map_err(map_err)?;
        row.map(TryInto::try_into).transpose()
    }

    async fn find_review_by_author(
        &self,
        plugin_id: Uuid,
        author_id: Uuid,
    ) -> Result<Option<Review>, StoreError> {
        let row: Option<ReviewRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM plugin_reviews WHERE plugin_id = $1 AND author_id = $2"
        )))
        .bind(plugin_id)
        .bind(author_id)
        .fetch_optional(self.pool())
        .await
        .map_err(map_err)?;
        row.map(TryInto::try_into).transpose()
    }

    async fn list_reviews(&self, plugin_id: Uuid) -> Result<Vec<Review>, StoreError> {
        let rows: Vec<ReviewRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM plugin_reviews WHERE plugin_id = $1
             ORDER BY updated_at DESC"
        )))
        .bind(plugin_id)
        .fetch_all(self.pool())
        .await
        .map_err(map_err)?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn list_reports(&self, review_id: Uuid) -> Result<Vec<Report>, StoreError> {
        let rows: Vec<(Uuid, Uuid, Uuid, String, Option<String>, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, review_id, reporter_id, reason, comment, created_at
                 FROM review_reports WHERE review_id = $1 ORDER BY created_at",
        )
        .bind(review_id)
        .fetch_all(self.pool())
        .await
        .map_err(map_err)?;
        rows.into_iter()
            .map(
                |(id, review_id, reporter_id, reason, comment, created_at)| {
                    Ok(Report {
                        id,
                        review_id,
                        reporter_id,
                        reason: parse_state(&reason, ReportReason::parse)?,
                        comment,
                        created_at,
                    })
                },
            )
            .collect()
    }

    async fn upsert_review(
        &self,
        review: &Review,
        event: &NewAuditEvent,
    ) -> Result<Review, StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        let row: ReviewRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "INSERT INTO plugin_reviews (id, plugin_id, author_id, organisation_id, rating, title,
                 body, status, reasons, labels, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
             ON CONFLICT (plugin_id, author_id) DO UPDATE SET rating = EXCLUDED.rating,
                 title = EXCLUDED.title, body = EXCLUDED.body, status = EXCLUDED.status,
                 reasons = EXCLUDED.reasons, labels = EXCLUDED.labels,
                 updated_at = EXCLUDED.updated_at
             RETURNING {REVIEW_COLUMNS}"
        )))
        .bind(review.id)
        .bind(review.plugin_id)
        .bind(review.author_id)
        .bind(review.organisation_id)
        .bind(i16::from(review.rating))
        .bind(&review.title)
        .bind(&review.body)
        .bind(review.status.as_str())
        .bind(&review.reasons)
        .bind(&review.labels)
        .bind(review.updated_at)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        let mut event = event.clone();
        event.target_id = row.id;
        insert_event(&mut tx, &event).await?;
        tx.commit().await.map_err(map_err)?;
        row.try_into()
    }

    async fn insert_report(
        &self,
        report: &Report,
        moderation: &ReviewModeration,
        event: &NewAuditEvent,
    ) -> Result<Option<Review>, StoreError> {
        let mut tx = self.pool().begin().await.map_err(map_err)?;
        let inserted = sqlx::query(
            "INSERT INTO review_reports (id, review_id, reporter_id, reason, comment, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (review_id, reporter_id) DO NOTHING",
        )
        .bind(report.id)
        .bind(report.review_id)
        .bind(report.reporter_id)
        .bind(report.reason.as_str())
        .bind(&report.comment)
        .bind(report.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if inserted == 0 {
            return Ok(None);
        }
        let row: ReviewRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "UPDATE plugin_reviews SET status = $2, reasons = $3, labels = $4
             WHERE id = $1 RETURNING {REVIEW_COLUMNS}"
        )))
        .bind(report.review_id)
        .bind(moderation.status.as_str())
        .bind(&moderation.reasons)
        .bind(&moderation.labels)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)?;
        row.try_into().map(Some)
    }
}

async fn insert_key(conn: &mut sqlx::PgConnection, key: &RunnerKey) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO runner_keys (id, runner_id, public_key, created_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(key.id)
    .bind(key.runner_id)
    .bind(&key.public_key)
    .bind(key.created_at)
    .execute(conn)
    .await
    .map_err(map_err)?;
    Ok(())
}
