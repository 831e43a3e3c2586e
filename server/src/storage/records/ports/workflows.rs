//! Workflows and their revisions.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{NewAuditEvent, RevisionState};
use crate::storage::StoreError;
use crate::storage::WriteContext;

#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowRevision {
    pub id: Uuid,
    pub workflow_id: Uuid,
    pub workspace_id: Uuid,
    pub number: i32,
    pub state: RevisionState,
    pub requested_by: Option<Uuid>,
    pub requested_at: Option<DateTime<Utc>>,
    pub comment: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The administrator who approved or rejected it, when, and why.
    pub decided_by: Option<Uuid>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decision_reason: Option<String>,
}

/// `pending_approval → approved | rejected`, decided by an administrator.
#[derive(Debug, Clone)]
pub struct RevisionDecision {
    pub revision_id: Uuid,
    /// The state the service read; the decision applies only if it is still the state.
    pub from: RevisionState,
    pub to: RevisionState,
    pub by: Uuid,
    pub reason: String,
    pub at: DateTime<Utc>,
    pub event: NewAuditEvent,
}

/// Workflows and their revisions; `request_approval` and `decide_revision` apply only from the
/// state they name.
#[async_trait]
pub trait WorkflowStore: Send + Sync {
    async fn create_workflow(
        &self,
        write: &WriteContext,
        workflow: &Workflow,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_workflows(&self, workspace_id: Option<Uuid>)
    -> Result<Vec<Workflow>, StoreError>;
    /// Up to `limit` workflows of the workspace in the order they were created, after the one
    /// with id `after` (the admin API's pages).
    async fn workflows_page(
        &self,
        workspace_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Workflow>, StoreError>;
    async fn get_workflow(&self, workflow_id: Uuid) -> Result<Option<Workflow>, StoreError>;
    /// A new `draft` revision numbered one past the workflow's newest.
    async fn create_revision(
        &self,
        write: &WriteContext,
        workflow: &Workflow,
        id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<WorkflowRevision, StoreError>;
    async fn get_revision(&self, revision_id: Uuid)
    -> Result<Option<WorkflowRevision>, StoreError>;
    /// `draft → pending_approval`; `None` when the revision is no longer a draft.
    async fn request_approval(
        &self,
        write: &WriteContext,
        revision_id: Uuid,
        by: Uuid,
        comment: Option<&str>,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<Option<WorkflowRevision>, StoreError>;
    /// Approves or rejects; `None` when the revision is no longer in `decision.from`.
    async fn decide_revision(
        &self,
        write: &WriteContext,
        decision: &RevisionDecision,
    ) -> Result<Option<WorkflowRevision>, StoreError>;
}
