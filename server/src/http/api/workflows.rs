//! POST /v1/workspaces/{workspaceId}/workflows/{workflowId}/revisions/{revisionId}/request-approval

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use crate::domain::Operation;
use crate::domain::{RevisionState, Timestamp, ValidationErrors};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::error_responses;
use crate::http::fields::{Text, request_body};
use crate::http::idempotency::{Idempotent, Permitted, path_id};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{Permission, Services};
use crate::storage::WorkflowRevision;

/// The optional comment of an approval request.
pub struct ApprovalComment(pub(super) Option<String>);

impl ApprovalComment {
    pub const MAX_CHARS: usize = 1000;
}

request_body! {
    /// Request body of an approval request.
    pub struct RequestApprovalInput {
        /// A note for the approvers; kept with the revision and in the audit log.
        "comment" => comment: optional Text<{ ApprovalComment::MAX_CHARS }>,
    }
}

impl Permitted for ApprovalComment {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        Permission::RequestWorkflowApproval {
            workspace: path_id(req, "workspaceId"),
            workflow: path_id(req, "workflowId"),
            revision: path_id(req, "revisionId"),
        }
    }
}

impl FromJson for ApprovalComment {
    type Body = RequestApprovalInput;

    fn from_body(body: RequestApprovalInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.comment.map(|c| c.0)))
    }
}

#[derive(Object)]
#[oai(rename = "WorkflowRevision", rename_all = "camelCase")]
pub struct WorkflowRevisionBody {
    id: Uuid,
    workflow_id: Uuid,
    number: i32,
    /// `draft → pending_approval → approved | rejected`.
    state: RevisionState,
    /// The user who asked for approval.
    #[oai(nullable)]
    requested_by: Option<Uuid>,
    #[oai(nullable)]
    requested_at: Option<Timestamp>,
}

impl From<WorkflowRevision> for WorkflowRevisionBody {
    fn from(r: WorkflowRevision) -> Self {
        Self {
            id: r.id,
            workflow_id: r.workflow_id,
            number: r.number,
            state: r.state,
            requested_by: r.requested_by,
            requested_at: r.requested_at.map(Timestamp::new),
        }
    }
}

#[derive(Object)]
pub struct WorkflowRevisionEnvelope {
    revision: WorkflowRevisionBody,
}

#[derive(ApiResponse)]
pub enum RequestApprovalResponse {
    /// The revision is pending approval.
    #[oai(status = 200)]
    Ok(Json<WorkflowRevisionEnvelope>),
}

error_responses!(RequestApprovalErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

fn request_workflow_approval(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::RequestWorkflowApproval, ep)
}

pub struct WorkflowsApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Workflows")]
impl WorkflowsApi {
    /// Request approval of a workflow revision
    ///
    /// Requires `workflows:request-approval` on the workspace. Moves a `draft` revision to
    /// `pending_approval` and records who asked; 409 `invalid_transition` from any other state.
    /// Workflows belong to no environment, so a token limited to some environments gets a 403
    /// `forbidden` (after the 404 for a revision that is not in the workspace).
    #[oai(
        path = "/workspaces/:workspaceId/workflows/:workflowId/revisions/:revisionId/request-approval",
        method = "post",
        operation_id = "requestWorkflowRevisionApproval",
        transform = "request_workflow_approval"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn request_approval(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        #[oai(name = "workflowId")] workflow_id: Path<String>,
        #[oai(name = "revisionId")] revision_id: Path<String>,
        body: Idempotent<JsonBody<ApprovalComment>>,
    ) -> Result<RequestApprovalResponse, RequestApprovalErrors> {
        let revision = services
            .request_approval(
                &auth.0,
                &workspace_id,
                &workflow_id,
                &revision_id,
                body.input.value.0,
                &body.write,
            )
            .await?;
        let envelope = WorkflowRevisionEnvelope {
            revision: revision.into(),
        };
        Ok(RequestApprovalResponse::Ok(Json(envelope)))
    }
}
