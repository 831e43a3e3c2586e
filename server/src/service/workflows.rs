//! Workflows and their revisions: created by the admin CLI; approval requested over the API.

use serde_json::json;
use uuid::Uuid;

use super::admin::{admin_event, parse_name};
use super::{Operation, ServiceError, Services};
use crate::domain::{Actor, CorrelationId, NewAuditEvent, Principal, parse_uuid};
use crate::storage::{Workflow, WorkflowRevision};

impl Services {
    pub async fn create_workflow(
        &self,
        workspace_id: Uuid,
        name: &str,
        cid: &CorrelationId,
    ) -> Result<Workflow, ServiceError> {
        let workspace = self
            .store
            .get_workspace(workspace_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such workspace"))?;
        let workflow = Workflow {
            id: Uuid::new_v4(),
            workspace_id,
            name: parse_name("name", name)?,
            created_at: Self::now(),
        };
        let event = admin_event(
            workspace.organisation_id,
            Some(workspace_id),
            "workflow.created",
            "workflow",
            workflow.id,
            cid,
            json!({ "name": workflow.name }),
        );
        self.store
            .create_workflow(&workflow, &event)
            .await
            .map_err(super::admin::already_exists(format!(
                "a workflow named {:?} already exists in this workspace",
                workflow.name
            )))?;
        Ok(workflow)
    }

    pub async fn list_workflows(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<Workflow>, ServiceError> {
        Ok(self.store.list_workflows(workspace_id).await?)
    }

    /// A new `draft` revision, numbered one past the newest.
    pub async fn create_revision(
        &self,
        workflow_id: Uuid,
        cid: &CorrelationId,
    ) -> Result<WorkflowRevision, ServiceError> {
        let workflow = self
            .store
            .get_workflow(workflow_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such workflow"))?;
        let workspace = self
            .store
            .get_workspace(workflow.workspace_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such workspace"))?;
        let id = Uuid::new_v4();
        let event = admin_event(
            workspace.organisation_id,
            Some(workflow.workspace_id),
            "workflow_revision.created",
            "workflow_revision",
            id,
            cid,
            json!({ "workflowId": workflow.id }),
        );
        Ok(self
            .store
            .create_revision(&workflow, id, Self::now(), &event)
            .await?)
    }

    /// `draft → pending_approval`, recording who asked; 409 from any other state.
    pub async fn request_approval(
        &self,
        principal: &Principal,
        workspace: &str,
        workflow: &str,
        revision: &str,
        comment: Option<String>,
        cid: &CorrelationId,
    ) -> Result<WorkflowRevision, ServiceError> {
        self.authorize(
            principal,
            Operation::RequestWorkflowApproval,
            Some(workspace),
            vec![
                ("workflowId", workflow.to_owned()),
                ("revisionId", revision.to_owned()),
            ],
        )
        .await?;
        let workspace_id =
            parse_uuid(workspace).ok_or_else(|| ServiceError::forbidden("no access"))?;
        let not_found = || ServiceError::not_found("no such workflow revision in this workspace");
        let (workflow_id, revision_id) = parse_uuid(workflow)
            .zip(parse_uuid(revision))
            .ok_or_else(not_found)?;
        let current = self
            .store
            .get_revision(revision_id)
            .await?
            .filter(|r| r.workflow_id == workflow_id && r.workspace_id == workspace_id)
            .ok_or_else(not_found)?;
        // Workflows belong to a workspace, not to an environment: they lie outside every token
        // limited to some environments.
        if !principal.environment_ids.is_empty() {
            return Err(ServiceError::forbidden(
                "the token is limited to some environments; workflows belong to none",
            ));
        }
        let conflict = |state: &str| ServiceError::Conflict {
            code: "invalid_transition",
            message: format!("only a draft revision can be sent for approval; this one is {state}"),
            details: Some(json!({ "state": state })),
        };
        if current.state != crate::domain::RevisionState::Draft {
            return Err(conflict(current.state.as_str()));
        }
        let event = NewAuditEvent {
            organisation_id: principal.organisation_id,
            workspace_id: Some(workspace_id),
            event_type: "workflow_revision.approval_requested",
            actor: Actor::user(principal.user_id),
            target_kind: "workflow_revision",
            target_id: revision_id,
            correlation_id: cid.to_string(),
            occurred_at: Self::now(),
            data: json!({ "workflowId": workflow_id, "number": current.number, "comment": comment }),
        };
        self.store
            .request_approval(
                revision_id,
                principal.user_id,
                comment.as_deref(),
                Self::now(),
                &event,
            )
            .await?
            .ok_or_else(|| conflict("no longer a draft"))
    }
}
