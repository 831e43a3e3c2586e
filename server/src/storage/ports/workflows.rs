//! Workflows and their revisions.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::NewAuditEvent;
use crate::storage::StoreError;

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
    pub state: crate::domain::RevisionState,
    pub requested_by: Option<Uuid>,
    pub requested_at: Option<DateTime<Utc>>,
    pub comment: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// Workflows and their revisions; `request_approval` applies only from the state it names.
#[async_trait]
pub trait WorkflowStore: Send + Sync {
    async fn create_workflow(
        &self,
        workflow: &Workflow,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_workflows(&self, workspace_id: Option<Uuid>)
    -> Result<Vec<Workflow>, StoreError>;
    async fn get_workflow(&self, workflow_id: Uuid) -> Result<Option<Workflow>, StoreError>;
    /// A new `draft` revision numbered one past the workflow's newest.
    async fn create_revision(
        &self,
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
        revision_id: Uuid,
        by: Uuid,
        comment: Option<&str>,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<Option<WorkflowRevision>, StoreError>;
}
