//! Workflows and their revisions: created, listed and decided by an organisation's
//! administrator over the admin API (`cpctl workflows`); approval requested over the v1 API.
//! The decider is the authenticated caller, and the four-eyes rule (a requester does not
//! approve its own request) is switched per organisation by an operator only: the admins it
//! constrains cannot lift it.

use serde_json::json;
use uuid::Uuid;

use super::admin::{event_by, parse_name};
use super::directory::{AdminPage, Paged};
use super::{Operation, Permission, ServiceError, Services};
use crate::domain::{
    FieldError, NewAuditEvent, Principal, RevisionState, Role, ValidationErrors, bounded_text,
    parse_uuid,
};
use crate::storage::{RevisionDecision, User, Workflow, WorkflowRevision, WriteContext};

/// The longest `reason` of an approval decision.
pub const DECISION_REASON_MAX: usize = 1000;

/// The setting under which an organisation allows a revision's requester to approve it.
fn self_approval_key(organisation_id: Uuid) -> String {
    format!("org:{organisation_id}:workflow_self_approval")
}

impl Services {
    pub async fn create_workflow(
        &self,
        workspace_id: Uuid,
        name: &str,
        write: &WriteContext,
    ) -> Result<Workflow, ServiceError> {
        let workspace = self.workspace(workspace_id).await?;
        let workflow = Workflow {
            id: Uuid::new_v4(),
            workspace_id,
            name: parse_name("name", name)?,
            created_at: Self::now(),
        };
        let event = event_by(
            write,
            workspace.organisation_id,
            Some(workspace_id),
            "workflow.created",
            "workflow",
            workflow.id,
            json!({ "name": workflow.name }),
        );
        self.store
            .create_workflow(write, &workflow, &event)
            .await
            .map_err(super::admin::already_exists(format!(
                "a workflow named {:?} already exists in this workspace",
                workflow.name
            )))?;
        Ok(workflow)
    }

    /// A new `draft` revision, numbered one past the newest.
    pub async fn create_revision(
        &self,
        workflow_id: Uuid,
        write: &WriteContext,
    ) -> Result<WorkflowRevision, ServiceError> {
        let workflow = self
            .store
            .get_workflow(workflow_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such workflow"))?;
        let workspace = self.workspace(workflow.workspace_id).await?;
        let id = Uuid::new_v4();
        let event = event_by(
            write,
            workspace.organisation_id,
            Some(workflow.workspace_id),
            "workflow_revision.created",
            "workflow_revision",
            id,
            json!({ "workflowId": workflow.id }),
        );
        Ok(self
            .store
            .create_revision(write, &workflow, id, Self::now(), &event)
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
        write: &WriteContext,
    ) -> Result<(), ServiceError> {
        let found = self.store.lookup_targets(organisation_id, &[], &[]).await?;
        if !found.organisation_exists {
            return Err(ServiceError::not_found("no such organisation"));
        }
        let event = event_by(
            write,
            organisation_id,
            None,
            "organisation.self_approval_set",
            "organisation",
            organisation_id,
            json!({ "allowed": allowed }),
        );
        let value = if allowed { "allowed" } else { "refused" };
        Ok(self
            .store
            .setting_put(write, &self_approval_key(organisation_id), value, &event)
            .await?)
    }

    /// `pending_approval → approved | rejected` (`to`), decided by `decider`: a user who
    /// administers the revision's organisation (its admin, or an operator), and for an approval
    /// not the user who requested it (unless the organisation allows it:
    /// [`Self::set_self_approval`]). Audited as `workflow_revision.approved` or `.rejected`,
    /// written with `write` (over HTTP, the decider's user and token), in the decision's
    /// transaction. A revision in any other state (a second decision included) is a conflict
    /// `invalid_transition`.
    pub async fn decide_revision(
        &self,
        revision_id: Uuid,
        to: RevisionState,
        decider: &User,
        reason: &str,
        write: &WriteContext,
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
        let user = decider;
        let administers = user.role == Role::Operator
            || (user.organisation_id == workspace.organisation_id && user.role.administers());
        if !administers || user.disabled.is_some() {
            return Err(ServiceError::forbidden(
                "the decider is not an administrator of the revision's organisation",
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
                reason: "the caller requested this revision's approval; another administrator \
                         must approve it (or an operator allows it: cpctl orgs self-approval allow)"
                    .into(),
                details: Some(json!({ "requestedBy": user.id })),
            });
        }
        let now = Self::now();
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
        match self.store.decide_revision(write, &decision).await? {
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

/// The admin API's workflow operations: the authorizer decides, then the route's workspace,
/// workflow or revision must belong to its organisation (else the same 404 as a missing one).
impl Services {
    /// The workflow the route names, which must belong to a workspace of its organisation.
    async fn workflow_in(
        &self,
        organisation_id: Uuid,
        workflow: &str,
    ) -> Result<Workflow, ServiceError> {
        let missing = || ServiceError::not_found("no such workflow in this organisation");
        let id = parse_uuid(workflow).ok_or_else(missing)?;
        let workflow = self.store.get_workflow(id).await?.ok_or_else(missing)?;
        match self.store.get_workspace(workflow.workspace_id).await? {
            Some(w) if w.organisation_id == organisation_id => Ok(workflow),
            _ => Err(missing()),
        }
    }

    pub async fn admin_create_workflow(
        &self,
        principal: &Principal,
        organisation: &str,
        workspace: &str,
        name: &str,
        write: &WriteContext,
    ) -> Result<Workflow, ServiceError> {
        let operation = Operation::CreateWorkflow;
        let org = self
            .admit_admin(principal, operation, organisation, Some(workspace))
            .await?;
        let workspace = self.workspace_of(org, workspace).await?;
        self.create_workflow(workspace.id, name, write).await
    }

    pub async fn admin_list_workflows(
        &self,
        principal: &Principal,
        organisation: &str,
        workspace: &str,
        page: AdminPage,
    ) -> Result<Paged<Workflow>, ServiceError> {
        let operation = Operation::ListWorkflows;
        let org = self
            .admit_admin(principal, operation, organisation, Some(workspace))
            .await?;
        let workspace = self.workspace_of(org, workspace).await?;
        let rows = self
            .store
            .workflows_page(workspace.id, page.after(), page.fetch())
            .await?;
        Ok(page.of(rows, |w| w.id))
    }

    pub async fn admin_create_revision(
        &self,
        principal: &Principal,
        organisation: &str,
        workflow: &str,
        write: &WriteContext,
    ) -> Result<WorkflowRevision, ServiceError> {
        let operation = Operation::CreateWorkflowRevision;
        let org = self
            .admit_admin(principal, operation, organisation, Some(workflow))
            .await?;
        let workflow = self.workflow_in(org, workflow).await?;
        self.create_revision(workflow.id, write).await
    }

    /// Approves or rejects (`to`) a revision as the caller, whose user must administer the
    /// revision's organisation; the self-approval rule applies to it.
    #[allow(clippy::too_many_arguments)]
    pub async fn admin_decide_revision(
        &self,
        principal: &Principal,
        organisation: &str,
        workflow: &str,
        revision: &str,
        to: RevisionState,
        reason: &str,
        write: &WriteContext,
    ) -> Result<WorkflowRevision, ServiceError> {
        let operation = match to {
            RevisionState::Approved => Operation::ApproveWorkflowRevision,
            _ => Operation::RejectWorkflowRevision,
        };
        let org = self
            .admit_admin(principal, operation, organisation, Some(workflow))
            .await?;
        let workflow = self.workflow_in(org, workflow).await?;
        let missing = || ServiceError::not_found("no such revision of this workflow");
        let revision_id = parse_uuid(revision).ok_or_else(missing)?;
        self.store
            .get_revision(revision_id)
            .await?
            .filter(|r| r.workflow_id == workflow.id)
            .ok_or_else(missing)?;
        let decider = self.get_user(principal.user_id).await?;
        self.decide_revision(revision_id, to, &decider, reason, write)
            .await
    }

    /// The four-eyes rule of an organisation, switched by an operator only (an operator-only
    /// operation: `authorize` holds that under any policy); answers the organisation's id.
    pub async fn admin_set_self_approval(
        &self,
        principal: &Principal,
        organisation: &str,
        allowed: bool,
        write: &WriteContext,
    ) -> Result<Uuid, ServiceError> {
        let operation = Operation::SetSelfApproval;
        let org = self
            .admit_admin(principal, operation, organisation, None)
            .await?;
        self.set_self_approval(org, allowed, write).await?;
        Ok(org)
    }
}
