//! The v1 routes whose operations later issues fill in. Each already authenticates and asks the
//! authorizer, so clients see the final 401/403 behaviour, then answers 501 with an ApiError.

use std::sync::Arc;

use poem::web::Data;
use poem_openapi::OpenApi;
use poem_openapi::param::Path;

use super::ApiTags;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::service::{Operation, Services};

error_responses!(PendingErrors: 400, 401, 403, 413, 429, 500, 501, 503);
error_responses!(PendingUnsignedErrors: 400, 413, 429, 500, 501, 503);

/// These routes have no success response yet, so the document lists none.
pub struct NotYet;

impl poem_openapi::ApiResponse for NotYet {
    fn meta() -> poem_openapi::registry::MetaResponses {
        poem_openapi::registry::MetaResponses { responses: vec![] }
    }

    fn register(_registry: &mut poem_openapi::registry::Registry) {}
}

impl poem::IntoResponse for NotYet {
    fn into_response(self) -> poem::Response {
        poem::http::StatusCode::NOT_IMPLEMENTED.into()
    }
}

type Pending = Result<NotYet, PendingErrors>;

async fn pending(
    services: &Services,
    auth: &BearerAuth,
    operation: Operation,
    workspace: Option<&str>,
) -> Pending {
    services
        .authorize(&auth.0, operation, workspace, vec![])
        .await?;
    Err(ApiFailure::not_implemented().into())
}

pub struct PendingApi;

#[OpenApi(prefix_path = "/v1")]
impl PendingApi {
    /// Delete a runner pool (not available yet)
    #[oai(
        path = "/workspaces/:workspaceId/runner-pools/:poolId",
        method = "delete",
        operation_id = "deleteRunnerPool",
        tag = "ApiTags::Runners"
    )]
    async fn delete_runner_pool(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        #[oai(name = "poolId")] _pool_id: Path<String>,
    ) -> Pending {
        pending(
            &services,
            &auth,
            Operation::DeleteRunnerPool,
            Some(&workspace_id),
        )
        .await
    }

    /// Submit a runner command (not available yet)
    #[oai(
        path = "/workspaces/:workspaceId/runner-commands",
        method = "post",
        operation_id = "submitRunnerCommand",
        tag = "ApiTags::Runners"
    )]
    async fn submit_runner_command(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
    ) -> Pending {
        pending(
            &services,
            &auth,
            Operation::SubmitRunnerCommand,
            Some(&workspace_id),
        )
        .await
    }

    /// Stream a workspace's audit events (not available yet)
    #[oai(
        path = "/workspaces/:workspaceId/audit/stream",
        method = "get",
        operation_id = "streamAuditEvents",
        tag = "ApiTags::Audit"
    )]
    async fn stream_audit(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
    ) -> Pending {
        pending(
            &services,
            &auth,
            Operation::ReadAuditStream,
            Some(&workspace_id),
        )
        .await
    }

    /// Report a webhook delivery's status, signed by the runner (not available yet)
    #[oai(
        path = "/runner/webhook-deliveries/:deliveryId/status",
        method = "post",
        operation_id = "reportDeliveryStatus",
        tag = "ApiTags::Runners"
    )]
    async fn report_delivery_status(
        &self,
        #[oai(name = "deliveryId")] _delivery_id: Path<String>,
    ) -> Result<NotYet, PendingUnsignedErrors> {
        Err(ApiFailure::not_implemented().into())
    }

    /// Request approval of a workflow revision (not available yet)
    #[oai(
        path = "/workspaces/:workspaceId/workflows/:workflowId/revisions/:revisionId/request-approval",
        method = "post",
        operation_id = "requestWorkflowRevisionApproval",
        tag = "ApiTags::Workflows"
    )]
    async fn request_approval(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        #[oai(name = "workflowId")] _workflow_id: Path<String>,
        #[oai(name = "revisionId")] _revision_id: Path<String>,
    ) -> Pending {
        pending(
            &services,
            &auth,
            Operation::RequestWorkflowApproval,
            Some(&workspace_id),
        )
        .await
    }

    /// Report a plugin review (not available yet)
    #[oai(
        path = "/marketplace/plugins/:pluginId/reviews/:reviewId/report",
        method = "post",
        operation_id = "reportPluginReview",
        tag = "ApiTags::Marketplace"
    )]
    async fn report_review(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "pluginId")] _plugin_id: Path<String>,
        #[oai(name = "reviewId")] _review_id: Path<String>,
    ) -> Pending {
        pending(&services, &auth, Operation::ReportReview, None).await
    }

    /// Create or replace the caller's own review of a plugin (not available yet)
    #[oai(
        path = "/marketplace/plugins/:pluginId/reviews/me",
        method = "put",
        operation_id = "putOwnPluginReview",
        tag = "ApiTags::Marketplace"
    )]
    async fn put_own_review(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "pluginId")] _plugin_id: Path<String>,
    ) -> Pending {
        pending(&services, &auth, Operation::WriteReview, None).await
    }
}
