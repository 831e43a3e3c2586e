//! An organisation's workflows on the admin plane: a workspace's workflows (create, list), a
//! workflow's revisions (create), deciding a revision's approval as the caller, and the
//! operator's switch of the self-approval rule. Thin: the rules are `service/workflows.rs`'s.

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use super::organisations::Named;
use crate::domain::{Operation, RevisionState, Timestamp, ValidationErrors};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::http::fields::{Text, request_body};
use crate::http::idempotency::{Idempotent, Permitted, admin_permission};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{AdminPage, DECISION_REASON_MAX, Permission, Services};
use crate::storage::{Workflow, WorkflowRevision};

type NewWorkflow = Named<{ Operation::CreateWorkflow as usize }>;

request_body! {
    /// Request body of creating a revision: an empty object.
    pub struct CreateWorkflowRevisionInput {}
}

#[derive(Debug)]
pub struct NewRevision;

impl FromJson for NewRevision {
    type Body = CreateWorkflowRevisionInput;

    fn from_body(_: CreateWorkflowRevisionInput) -> Result<Self, ValidationErrors> {
        Ok(Self)
    }
}

impl Permitted for NewRevision {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::CreateWorkflowRevision, req)
    }
}

request_body! {
    /// Request body of approving or rejecting a revision.
    pub struct DecideWorkflowRevisionInput {
        /// Why; kept with the revision and in the audit log.
        "reason" => reason: required Text<DECISION_REASON_MAX>,
    }
}

/// A decision's reason, for the operation `O` (approve or reject).
#[derive(Debug)]
pub struct Decision<const O: usize>(String);

impl<const O: usize> FromJson for Decision<O> {
    type Body = DecideWorkflowRevisionInput;

    fn from_body(body: DecideWorkflowRevisionInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.reason.0))
    }
}

impl<const O: usize> Permitted for Decision<O> {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::ALL[O], req)
    }
}

pub(super) type Approval = Decision<{ Operation::ApproveWorkflowRevision as usize }>;
pub(super) type Rejection = Decision<{ Operation::RejectWorkflowRevision as usize }>;

request_body! {
    /// Request body of the self-approval rule.
    pub struct SetSelfApprovalInput {
        /// Whether a revision's requester may approve it in this organisation (refused unless
        /// allowed).
        "allowed" => allowed: required bool,
    }
}

#[derive(Debug)]
pub struct SelfApproval(pub(super) bool);

impl FromJson for SelfApproval {
    type Body = SetSelfApprovalInput;

    fn from_body(body: SetSelfApprovalInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.allowed))
    }
}

impl Permitted for SelfApproval {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::SetSelfApproval, req)
    }
}

#[derive(Object)]
#[oai(rename = "Workflow", rename_all = "camelCase")]
pub struct WorkflowBody {
    id: Uuid,
    workspace_id: Uuid,
    name: String,
    created_at: Timestamp,
}

impl From<Workflow> for WorkflowBody {
    fn from(w: Workflow) -> Self {
        Self {
            id: w.id,
            workspace_id: w.workspace_id,
            name: w.name,
            created_at: w.created_at.into(),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct WorkflowEnvelope {
    workflow: WorkflowBody,
}

#[derive(Object)]
#[oai(rename = "WorkflowPage", rename_all = "camelCase")]
pub struct WorkflowPageBody {
    /// In the order the workflows were created.
    items: Vec<WorkflowBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

/// A revision as an administrator sees it: with its request and its decision.
#[derive(Object)]
#[oai(rename = "WorkflowRevisionDetail", rename_all = "camelCase")]
pub struct RevisionDetailBody {
    id: Uuid,
    workflow_id: Uuid,
    workspace_id: Uuid,
    number: i32,
    /// `draft → pending_approval → approved | rejected`.
    state: RevisionState,
    #[oai(nullable)]
    requested_by: Option<Uuid>,
    #[oai(nullable)]
    requested_at: Option<Timestamp>,
    #[oai(nullable)]
    comment: Option<String>,
    created_at: Timestamp,
    /// The administrator who approved or rejected it.
    #[oai(nullable)]
    decided_by: Option<Uuid>,
    #[oai(nullable)]
    decided_at: Option<Timestamp>,
    #[oai(nullable)]
    decision_reason: Option<String>,
}

impl From<WorkflowRevision> for RevisionDetailBody {
    fn from(r: WorkflowRevision) -> Self {
        Self {
            id: r.id,
            workflow_id: r.workflow_id,
            workspace_id: r.workspace_id,
            number: r.number,
            state: r.state,
            requested_by: r.requested_by,
            requested_at: r.requested_at.map(Timestamp::new),
            comment: r.comment,
            created_at: r.created_at.into(),
            decided_by: r.decided_by,
            decided_at: r.decided_at.map(Timestamp::new),
            decision_reason: r.decision_reason,
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct RevisionDetailEnvelope {
    revision: RevisionDetailBody,
}

#[derive(Object)]
#[oai(rename = "SelfApproval", rename_all = "camelCase")]
pub struct SelfApprovalBody {
    organisation_id: Uuid,
    /// Whether a revision's requester may approve it.
    self_approval: bool,
}

#[derive(ApiResponse)]
pub enum CreateWorkflowResponse {
    /// The workflow was created.
    #[oai(status = 200)]
    Ok(Json<WorkflowEnvelope>),
}

#[derive(ApiResponse)]
pub enum ListWorkflowsResponse {
    #[oai(status = 200)]
    Ok(Json<WorkflowPageBody>),
}

#[derive(ApiResponse)]
pub enum RevisionResponse {
    /// The revision as it is now.
    #[oai(status = 200)]
    Ok(Json<RevisionDetailEnvelope>),
}

#[derive(ApiResponse)]
pub enum SelfApprovalResponse {
    /// The rule as it is now.
    #[oai(status = 200)]
    Ok(Json<SelfApprovalBody>),
}

error_responses!(CreateWorkflowErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);
error_responses!(ReadWorkflowsErrors: 400, 401, 403, 404, 413, 429, 500, 503);
error_responses!(ChangeWorkflowErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

fn create_workflow(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::CreateWorkflow, ep)
}

fn list_workflows(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListWorkflows, ep)
}

fn create_workflow_revision(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::CreateWorkflowRevision, ep)
}

fn approve_workflow_revision(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ApproveWorkflowRevision, ep)
}

fn reject_workflow_revision(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RejectWorkflowRevision, ep)
}

fn set_self_approval(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::SetSelfApproval, ep)
}

pub struct WorkflowAdminApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Admin")]
impl WorkflowAdminApi {
    /// Create a workflow
    ///
    /// Requires `admin:write` and a user who administers the organisation. Names are unique
    /// within the workspace (409 otherwise). A workspace of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/workspaces/:workspaceId/workflows",
        method = "post",
        operation_id = "createWorkflow",
        transform = "create_workflow"
    )]
    async fn create(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        body: Idempotent<JsonBody<NewWorkflow>>,
    ) -> Result<CreateWorkflowResponse, CreateWorkflowErrors> {
        let workflow = services
            .admin_create_workflow(
                &auth.0,
                &organisation_id,
                &workspace_id,
                body.input.value.name(),
                &body.write,
            )
            .await?;
        Ok(CreateWorkflowResponse::Ok(Json(WorkflowEnvelope {
            workflow: workflow.into(),
        })))
    }

    /// List a workspace's workflows
    ///
    /// Requires `admin:read` and a user who administers the organisation. In the order they
    /// were created, at most `limit` per page.
    #[oai(
        path = "/organisations/:organisationId/workspaces/:workspaceId/workflows",
        method = "get",
        operation_id = "listWorkflows",
        transform = "list_workflows"
    )]
    async fn list(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListWorkflowsResponse, ReadWorkflowsErrors> {
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let page = services
            .admin_list_workflows(&auth.0, &organisation_id, &workspace_id, page)
            .await?;
        Ok(ListWorkflowsResponse::Ok(Json(WorkflowPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }

    /// Create a workflow revision
    ///
    /// Requires `admin:write` and a user who administers the organisation. A new `draft`,
    /// numbered one past the newest. A workflow of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/workflows/:workflowId/revisions",
        method = "post",
        operation_id = "createWorkflowRevision",
        transform = "create_workflow_revision"
    )]
    async fn create_revision(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "workflowId")] workflow_id: Path<String>,
        body: Idempotent<JsonBody<NewRevision>>,
    ) -> Result<RevisionResponse, ChangeWorkflowErrors> {
        let revision = services
            .admin_create_revision(&auth.0, &organisation_id, &workflow_id, &body.write)
            .await?;
        Ok(RevisionResponse::Ok(Json(RevisionDetailEnvelope {
            revision: revision.into(),
        })))
    }

    /// Approve a workflow revision
    ///
    /// Requires `admin:write` and a user who administers the organisation: the caller decides.
    /// Only a `pending_approval` revision (409 `invalid_transition` otherwise), and not by the
    /// user who requested its approval (403) unless an operator allowed self-approval in the
    /// organisation. Audited as `workflow_revision.approved`.
    #[oai(
        path = "/organisations/:organisationId/workflows/:workflowId/revisions/:revisionId/approve",
        method = "post",
        operation_id = "approveWorkflowRevision",
        transform = "approve_workflow_revision"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn approve(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "workflowId")] workflow_id: Path<String>,
        #[oai(name = "revisionId")] revision_id: Path<String>,
        body: Idempotent<JsonBody<Approval>>,
    ) -> Result<RevisionResponse, ChangeWorkflowErrors> {
        let revision = services
            .admin_decide_revision(
                &auth.0,
                &organisation_id,
                &workflow_id,
                &revision_id,
                RevisionState::Approved,
                &body.input.value.0,
                &body.write,
            )
            .await?;
        Ok(RevisionResponse::Ok(Json(RevisionDetailEnvelope {
            revision: revision.into(),
        })))
    }

    /// Reject a workflow revision
    ///
    /// Requires `admin:write` and a user who administers the organisation: the caller decides.
    /// Only a `pending_approval` revision (409 `invalid_transition` otherwise); its requester
    /// may reject it (withdraw it). Audited as `workflow_revision.rejected`.
    #[oai(
        path = "/organisations/:organisationId/workflows/:workflowId/revisions/:revisionId/reject",
        method = "post",
        operation_id = "rejectWorkflowRevision",
        transform = "reject_workflow_revision"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn reject(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "workflowId")] workflow_id: Path<String>,
        #[oai(name = "revisionId")] revision_id: Path<String>,
        body: Idempotent<JsonBody<Rejection>>,
    ) -> Result<RevisionResponse, ChangeWorkflowErrors> {
        let revision = services
            .admin_decide_revision(
                &auth.0,
                &organisation_id,
                &workflow_id,
                &revision_id,
                RevisionState::Rejected,
                &body.input.value.0,
                &body.write,
            )
            .await?;
        Ok(RevisionResponse::Ok(Json(RevisionDetailEnvelope {
            revision: revision.into(),
        })))
    }

    /// Allow or refuse self-approval in an organisation
    ///
    /// Requires `admin:write` and an operator: the four-eyes rule is not switched by the admins
    /// it constrains (403). Audited as `organisation.self_approval_set`.
    #[oai(
        path = "/organisations/:organisationId/self-approval",
        method = "put",
        operation_id = "setSelfApproval",
        transform = "set_self_approval"
    )]
    async fn set_self_approval(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        body: Idempotent<JsonBody<SelfApproval>>,
    ) -> Result<SelfApprovalResponse, ChangeWorkflowErrors> {
        let allowed = body.input.value.0;
        let organisation_id = services
            .admin_set_self_approval(&auth.0, &organisation_id, allowed, &body.write)
            .await?;
        Ok(SelfApprovalResponse::Ok(Json(SelfApprovalBody {
            organisation_id,
            self_approval: allowed,
        })))
    }
}
