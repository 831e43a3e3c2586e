//! Workflows and their revisions (shared by both SQL adapters; see the layout in `storage/mod.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::{NewAuditEvent, RevisionState};
use crate::storage::records::dialect::Dialect;
use crate::storage::records::rows::{RevisionRow, WorkflowRow, with_data};
use crate::storage::{
    RevisionDecision, StoreError, Workflow, WorkflowRevision, WorkflowStore, WriteContext,
};

/// A revision with its workflow's workspace. SQLite's RETURNING cannot name a joined table, so
/// the workspace comes from a subquery (`workflow_id` being the revision's own column).
const REVISION_COLUMNS: &str = "id, workflow_id,
    (SELECT w.workspace_id FROM workflows w WHERE w.id = workflow_id) AS workspace_id,
    number, state, requested_by, requested_at, request_comment, created_at, decided_by,
    decided_at, decision_reason";

#[async_trait]
impl<S: Dialect> WorkflowStore for S {
    async fn create_workflow(
        &self,
        write: &WriteContext,
        workflow: &Workflow,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query(
            "INSERT INTO workflows (id, workspace_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(workflow.id)
        .bind(workflow.workspace_id)
        .bind(&workflow.name)
        .bind(workflow.created_at)
        .execute(&mut *tx)
        .await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn list_workflows(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<Workflow>, StoreError> {
        let rows: Vec<WorkflowRow> = S::query(
            "SELECT id, workspace_id, name, created_at FROM workflows
             WHERE ($1 IS NULL OR workspace_id = $1) ORDER BY created_at, name",
        )
        .bind(workspace_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn workflows_page(
        &self,
        workspace_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Workflow>, StoreError> {
        // Keyset on (created_at, id), as the other admin pages.
        let rows: Vec<WorkflowRow> = S::query(
            "SELECT id, workspace_id, name, created_at FROM workflows
             WHERE workspace_id = $1
               AND ($2 IS NULL OR (created_at, id) > (SELECT created_at, id FROM workflows WHERE id = $2))
             ORDER BY created_at, id LIMIT $3",
        )
        .bind(workspace_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn get_workflow(&self, workflow_id: Uuid) -> Result<Option<Workflow>, StoreError> {
        let row: Option<WorkflowRow> =
            S::query("SELECT id, workspace_id, name, created_at FROM workflows WHERE id = $1")
                .bind(workflow_id)
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(Into::into))
    }

    async fn create_revision(
        &self,
        write: &WriteContext,
        workflow: &Workflow,
        id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<WorkflowRevision, StoreError> {
        let mut tx = self.begin(write).await?;
        // Postgres: the workflow's row lock serialises numbering (SQLite: the write lock does).
        S::query(sqlx::AssertSqlSafe(format!(
            "SELECT 1 FROM workflows WHERE id = $1 {for_update}",
            for_update = S::FOR_UPDATE
        )))
        .bind(workflow.id)
        .execute(&mut *tx)
        .await?;
        let (number,): (i32,) = S::query(
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
        .await?;
        let event = with_data(event, "number", Value::from(number));
        S::insert_event(&mut tx, &event).await?;
        self.commit(tx, write).await?;
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
            decided_by: None,
            decided_at: None,
            decision_reason: None,
        })
    }

    async fn get_revision(
        &self,
        revision_id: Uuid,
    ) -> Result<Option<WorkflowRevision>, StoreError> {
        let row: Option<RevisionRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {REVISION_COLUMNS} FROM workflow_revisions WHERE id = $1"
        )))
        .bind(revision_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn request_approval(
        &self,
        write: &WriteContext,
        revision_id: Uuid,
        by: Uuid,
        comment: Option<&str>,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<Option<WorkflowRevision>, StoreError> {
        let mut tx = self.begin(write).await?;
        // Only a draft moves: a revision already requested is a conflict.
        let row: Option<RevisionRow> = S::query(sqlx::AssertSqlSafe(format!(
            "UPDATE workflow_revisions SET state = $2, requested_by = $3, requested_at = $4,
                 request_comment = $5
             WHERE id = $1 AND state = $6
             RETURNING {REVISION_COLUMNS}"
        )))
        .bind(revision_id)
        .bind(RevisionState::PendingApproval.as_str())
        .bind(by)
        .bind(at)
        .bind(comment)
        .bind(RevisionState::Draft.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        row.try_into().map(Some)
    }

    async fn decide_revision(
        &self,
        write: &WriteContext,
        d: &RevisionDecision,
    ) -> Result<Option<WorkflowRevision>, StoreError> {
        let mut tx = self.begin(write).await?;
        // Applies only from the state the service read: a second decision is a conflict.
        let row: Option<RevisionRow> = S::query(sqlx::AssertSqlSafe(format!(
            "UPDATE workflow_revisions SET state = $2, decided_by = $3, decided_at = $4,
                 decision_reason = $5
             WHERE id = $1 AND state = $6
             RETURNING {REVISION_COLUMNS}"
        )))
        .bind(d.revision_id)
        .bind(d.to.as_str())
        .bind(d.by)
        .bind(d.at)
        .bind(&d.reason)
        .bind(d.from.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        S::insert_event(&mut tx, &d.event).await?;
        self.commit(tx, write).await?;
        row.try_into().map(Some)
    }
}
