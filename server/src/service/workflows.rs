//! Workflows and their revisions: created by the admin CLI; approval requested over the API;
//! decided by an administrator through the admin CLI (the v1 contract has no route for it).

use serde_json::json;
use uuid::Uuid;

use super::admin::{UserRef, admin_event, parse_name};
use super::{Permission, ServiceError, Services};
use crate::domain::{
    Actor, CorrelationId, FieldError, NewAuditEvent, Principal, RevisionState, ValidationErrors,
    bounded_text, parse_uuid,
};
use crate::storage::{RevisionDecision, Workflow, WorkflowRevision, WriteContext};

/// The longest `--reason` of an approval decision.
pub const DECISION_REASON_MAX: usize = 1000;

/// How a decision reaches the service: `cpctl`, which names its actor (`--actor`) without
/// authenticating it. Every decision event says so.
const DECIDED_VIA: &str = "cpctl";

/// The setting under which an organisation allows a revision's requester to approve it.
fn self_approval_key(organisation_id: Uuid) -> String {
    format!("org:{organisation_id}:workflow_self_approval")
}

impl Services {
    pub async fn create_workflow(
        &self,
        workspace_id: Uuid,
        name: &str,
        cid: &CorrelationId,
    ) -> Result<Workflow, ServiceError> {
        let workspace = self.workspace(workspace_id).await?;
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
            .create_workflow(&WriteContext::admin(cid), &workflow, &event)
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
        let workspace = self.workspace(workflow.workspace_id).await?;
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
            .create_revision(
                &WriteContext::admin(cid),
                &workflow,
                id,
                Self::now(),
                &event,
            )
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
        write: &WriteContext,
    ) -> Result<WorkflowRevision, ServiceError> {
        let permission = Permission::RequestWorkflowApproval {
            workspace,
            workflow,
            revision,
        };
        self.authorize_permission(principal, &permission).await?;
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
        if !current.state.can_move_to(RevisionState::PendingApproval) {
            return Err(conflict(current.state.as_str()));
        }
        let event = NewAuditEvent {
            organisation_id: principal.organisation_id,
            workspace_id: Some(workspace_id),
            event_type: "workflow_revision.approval_requested",
            actor: write.actor(),
            target_kind: "workflow_revision",
            target_id: revision_id,
            correlation_id: write.correlation_id().to_string(),
            occurred_at: Self::now(),
            data: json!({ "workflowId": workflow_id, "number": current.number, "comment": comment }),
        };
        self.store
            .request_approval(
                write,
                revision_id,
                principal.user_id,
                comment.as_deref(),
                Self::now(),
                &event,
            )
            .await?
            .ok_or_else(|| conflict("no longer a draft"))
    }

    /// Whether the organisation lets a revision's requester approve it (off unless set).
    async fn self_approval_allowed(&self, organisation_id: Uuid) -> Result<bool, ServiceError> {
        let value = self
            .store
            .setting_get(&self_approval_key(organisation_id))
            .await?;
        Ok(value.as_deref() == Some("allowed"))
    }

    /// Allows (or again refuses) approvals by a revision's own requester in an organisation;
    /// audited as `organisation.self_approval_set`.
    pub async fn set_self_approval(
        &self,
        organisation_id: Uuid,
        allowed: bool,
        cid: &CorrelationId,
    ) -> Result<(), ServiceError> {
        if !self
            .store
            .list_organisations()
            .await?
            .iter()
            .any(|o| o.id == organisation_id)
        {
            return Err(ServiceError::not_found("no such organisation"));
        }
        let event = admin_event(
            organisation_id,
            None,
            "organisation.self_approval_set",
            "organisation",
            organisation_id,
            cid,
            json!({ "allowed": allowed, "via": DECIDED_VIA }),
        );
        let value = if allowed { "allowed" } else { "refused" };
        Ok(self
            .store
            .setting_put(
                &WriteContext::admin(cid),
                &self_approval_key(organisation_id),
                value,
                &event,
            )
            .await?)
    }

    /// `pending_approval → approved | rejected` (`to`), decided by `actor`: a user of the
    /// revision's organisation who is one of its administrators, and for an approval not the
    /// user who requested it (unless the organisation allows it: [`Self::set_self_approval`]).
    /// Audited as `workflow_revision.approved` or `.rejected`, with the named user as the actor
    /// and `"via": "cpctl"` (the actor is named, not authenticated), in the decision's
    /// transaction. A revision in any other state (a second decision included) is a conflict
    /// `invalid_transition`.
    pub async fn decide_revision(
        &self,
        revision_id: Uuid,
        to: RevisionState,
        actor: &UserRef,
        reason: &str,
        cid: &CorrelationId,
    ) -> Result<WorkflowRevision, ServiceError> {
        let event_type = match to {
            RevisionState::Approved => "workflow_revision.approved",
            RevisionState::Rejected => "workflow_revision.rejected",
            other => {
                return Err(ServiceError::Internal(format!("{other} is not a decision")));
            }
        };
        let reason = bounded_text(reason, DECISION_REASON_MAX)
            .map_err(|reason| ValidationErrors::from(FieldError::new("reason", reason)))?;
        let current = self
            .store
            .get_revision(revision_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such workflow revision"))?;
        let workspace = self.workspace(current.workspace_id).await?;
        let user = self.find_user(workspace.organisation_id, actor).await?;
        if !user.role.administers() {
            return Err(ServiceError::forbidden(
                "the actor is not an administrator of the revision's organisation",
            ));
        }
        let conflict = |state: RevisionState| ServiceError::Conflict {
            code: "invalid_transition",
            message: format!("only a pending_approval revision can be {to}; this one is {state}"),
            details: Some(json!({ "from": state.as_str(), "to": to.as_str() })),
        };
        if !current.state.can_move_to(to) {
            return Err(conflict(current.state));
        }
        // Rejecting one's own request withdraws it; approving it is the four-eyes rule's case.
        let own = current.requested_by == Some(user.id);
        if own
            && to == RevisionState::Approved
            && !self
                .self_approval_allowed(workspace.organisation_id)
                .await?
        {
            return Err(ServiceError::Forbidden {
                reason: "the actor requested this revision's approval; another administrator \
                         must approve it (or allow it: cpctl orgs self-approval allow)"
                    .into(),
                details: Some(json!({ "requestedBy": user.id })),
            });
        }
        let now = Self::now();
        // Decided by the named user, through cpctl.
        let write = WriteContext::immediate(cid.clone(), Actor::user_only(user.id));
        let event = NewAuditEvent {
            organisation_id: workspace.organisation_id,
            workspace_id: Some(current.workspace_id),
            event_type,
            actor: write.actor(),
            target_kind: "workflow_revision",
            target_id: revision_id,
            correlation_id: write.correlation_id().to_string(),
            occurred_at: now,
            data: json!({
                "workflowId": current.workflow_id,
                "number": current.number,
                "from": current.state.as_str(),
                "to": to.as_str(),
                "reason": reason,
                "via": DECIDED_VIA,
                "requestedBy": current.requested_by,
                "selfApproval": own && to == RevisionState::Approved,
            }),
        };
        let decision = RevisionDecision {
            revision_id,
            from: current.state,
            to,
            by: user.id,
            reason,
            at: now,
            event,
        };
        match self.store.decide_revision(&write, &decision).await? {
            Some(decided) => Ok(decided),
            // Decided (or otherwise moved) since it was read: answer with the state it is in.
            None => {
                let state = self
                    .store
                    .get_revision(revision_id)
                    .await?
                    .map(|r| r.state)
                    .unwrap_or(current.state);
                Err(conflict(state))
            }
        }
    }
}
