//! Organisations (`/v1/organisations`, the operator's), their workspaces and the workspaces'
//! environments on the admin plane. Thin: the rules are `service/directory.rs`'s.

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use crate::domain::{Operation, Timestamp, ValidationErrors};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::http::fields::{Text, request_body};
use crate::http::idempotency::{Idempotent, Permitted, admin_permission};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{AdminPage, Paged, Permission, Services};
use crate::storage::{Environment, Organisation, Workspace};

/// The longest name of an organisation, workspace or environment, in characters.
const MAX_NAME: usize = 120;

request_body! {
    /// Request body of creating an organisation, a workspace or an environment.
    pub struct NameInput {
        /// Unique among its siblings (409 otherwise).
        "name" => name: required Text<MAX_NAME>,
    }
}

/// A parsed name, for the operation `O` (whose question a replay asks again).
#[derive(Debug)]
pub struct Named<const O: usize>(String);

impl<const O: usize> FromJson for Named<O> {
    type Body = NameInput;

    fn from_body(body: NameInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.name.0))
    }
}

impl<const O: usize> Named<O> {
    pub(super) fn name(&self) -> &str {
        &self.0
    }
}

impl<const O: usize> Permitted for Named<O> {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::ALL[O], req)
    }
}

type NewOrganisation = Named<{ Operation::CreateOrganisation as usize }>;
type NewWorkspace = Named<{ Operation::CreateWorkspace as usize }>;
type NewEnvironment = Named<{ Operation::CreateEnvironment as usize }>;

#[derive(Object)]
#[oai(rename = "Organisation", rename_all = "camelCase")]
pub struct OrganisationBody {
    id: Uuid,
    name: String,
    created_at: Timestamp,
}

impl From<Organisation> for OrganisationBody {
    fn from(o: Organisation) -> Self {
        Self {
            id: o.id,
            name: o.name,
            created_at: o.created_at.into(),
        }
    }
}

#[derive(Object)]
#[oai(rename = "Workspace", rename_all = "camelCase")]
pub struct WorkspaceBody {
    id: Uuid,
    organisation_id: Uuid,
    name: String,
    created_at: Timestamp,
}

impl From<Workspace> for WorkspaceBody {
    fn from(w: Workspace) -> Self {
        Self {
            id: w.id,
            organisation_id: w.organisation_id,
            name: w.name,
            created_at: w.created_at.into(),
        }
    }
}

#[derive(Object)]
#[oai(rename = "Environment", rename_all = "camelCase")]
pub struct EnvironmentBody {
    id: Uuid,
    workspace_id: Uuid,
    name: String,
    created_at: Timestamp,
}

impl From<Environment> for EnvironmentBody {
    fn from(e: Environment) -> Self {
        Self {
            id: e.id,
            workspace_id: e.workspace_id,
            name: e.name,
            created_at: e.created_at.into(),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct OrganisationEnvelope {
    organisation: OrganisationBody,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct WorkspaceEnvelope {
    workspace: WorkspaceBody,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct EnvironmentEnvelope {
    environment: EnvironmentBody,
}

/// A page of the admin API, in creation order.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct OrganisationPage {
    items: Vec<OrganisationBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct WorkspacePage {
    items: Vec<WorkspaceBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct EnvironmentPage {
    items: Vec<EnvironmentBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

fn items<T, B: From<T>>(page: Paged<T>) -> (Vec<B>, Option<String>) {
    (
        page.items.into_iter().map(Into::into).collect(),
        page.next_cursor,
    )
}

#[derive(ApiResponse)]
pub enum OrganisationResponse {
    #[oai(status = 200)]
    Ok(Json<OrganisationEnvelope>),
}

#[derive(ApiResponse)]
pub enum OrganisationPageResponse {
    #[oai(status = 200)]
    Ok(Json<OrganisationPage>),
}

#[derive(ApiResponse)]
pub enum WorkspaceResponse {
    #[oai(status = 200)]
    Ok(Json<WorkspaceEnvelope>),
}

#[derive(ApiResponse)]
pub enum WorkspacePageResponse {
    #[oai(status = 200)]
    Ok(Json<WorkspacePage>),
}

#[derive(ApiResponse)]
pub enum EnvironmentResponse {
    #[oai(status = 200)]
    Ok(Json<EnvironmentEnvelope>),
}

#[derive(ApiResponse)]
pub enum EnvironmentPageResponse {
    #[oai(status = 200)]
    Ok(Json<EnvironmentPage>),
}

error_responses!(CreateErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);
error_responses!(ListErrors: 400, 401, 403, 404, 413, 429, 500, 503);

fn create_organisation(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::CreateOrganisation, ep)
}

fn list_organisations(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListOrganisations, ep)
}

fn create_workspace(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::CreateWorkspace, ep)
}

fn list_workspaces(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListWorkspaces, ep)
}

fn create_environment(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::CreateEnvironment, ep)
}

fn list_environments(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListEnvironments, ep)
}

pub struct OrganisationsApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Admin")]
impl OrganisationsApi {
    /// Create an organisation
    ///
    /// Requires `admin:write` and an `operator`.
    #[oai(
        path = "/organisations",
        method = "post",
        operation_id = "createOrganisation",
        transform = "create_organisation"
    )]
    async fn create_organisation(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        body: Idempotent<JsonBody<NewOrganisation>>,
    ) -> Result<OrganisationResponse, CreateErrors> {
        let Named(name) = body.input.value;
        let organisation = services
            .admin_create_organisation(&auth.0, &name, &body.write)
            .await?;
        let organisation = organisation.into();
        Ok(OrganisationResponse::Ok(Json(OrganisationEnvelope {
            organisation,
        })))
    }

    /// List the organisations
    ///
    /// Requires `admin:read` and an `operator`. In the order they were created.
    #[oai(
        path = "/organisations",
        method = "get",
        operation_id = "listOrganisations",
        transform = "list_organisations"
    )]
    async fn list_organisations(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<OrganisationPageResponse, ListErrors> {
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let (items, next_cursor) = items(services.admin_list_organisations(&auth.0, page).await?);
        Ok(OrganisationPageResponse::Ok(Json(OrganisationPage {
            items,
            next_cursor,
        })))
    }

    /// Create a workspace
    ///
    /// Requires `admin:write` and a user who administers the organisation.
    #[oai(
        path = "/organisations/:organisationId/workspaces",
        method = "post",
        operation_id = "createWorkspace",
        transform = "create_workspace"
    )]
    async fn create_workspace(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        body: Idempotent<JsonBody<NewWorkspace>>,
    ) -> Result<WorkspaceResponse, CreateErrors> {
        let Named(name) = body.input.value;
        let workspace = services
            .admin_create_workspace(&auth.0, &organisation_id, &name, &body.write)
            .await?;
        let workspace = workspace.into();
        Ok(WorkspaceResponse::Ok(Json(WorkspaceEnvelope { workspace })))
    }

    /// List an organisation's workspaces
    ///
    /// Requires `admin:read` and a user who administers the organisation. In the order they
    /// were created.
    #[oai(
        path = "/organisations/:organisationId/workspaces",
        method = "get",
        operation_id = "listWorkspaces",
        transform = "list_workspaces"
    )]
    async fn list_workspaces(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<WorkspacePageResponse, ListErrors> {
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let listed = services
            .admin_list_workspaces(&auth.0, &organisation_id, page)
            .await?;
        let (items, next_cursor) = items(listed);
        Ok(WorkspacePageResponse::Ok(Json(WorkspacePage {
            items,
            next_cursor,
        })))
    }

    /// Create an environment of a workspace
    ///
    /// Requires `admin:write` and a user who administers the organisation; the workspace must
    /// be the organisation's (404 otherwise).
    #[oai(
        path = "/organisations/:organisationId/workspaces/:workspaceId/environments",
        method = "post",
        operation_id = "createEnvironment",
        transform = "create_environment"
    )]
    async fn create_environment(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        body: Idempotent<JsonBody<NewEnvironment>>,
    ) -> Result<EnvironmentResponse, CreateErrors> {
        let Named(name) = body.input.value;
        let environment = services
            .admin_create_environment(&auth.0, &organisation_id, &workspace_id, &name, &body.write)
            .await?;
        let environment = environment.into();
        Ok(EnvironmentResponse::Ok(Json(EnvironmentEnvelope {
            environment,
        })))
    }

    /// List a workspace's environments
    ///
    /// Requires `admin:read` and a user who administers the organisation. In the order they
    /// were created.
    #[oai(
        path = "/organisations/:organisationId/workspaces/:workspaceId/environments",
        method = "get",
        operation_id = "listEnvironments",
        transform = "list_environments"
    )]
    async fn list_environments(
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
    ) -> Result<EnvironmentPageResponse, ListErrors> {
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let listed = services
            .admin_list_environments(&auth.0, &organisation_id, &workspace_id, page)
            .await?;
        let (items, next_cursor) = items(listed);
        Ok(EnvironmentPageResponse::Ok(Json(EnvironmentPage {
            items,
            next_cursor,
        })))
    }
}
