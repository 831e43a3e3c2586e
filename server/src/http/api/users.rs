//! An organisation's users on the admin plane: `/v1/organisations/{organisationId}/users`
//! (create, list) and `/users/{userId}` (show, disable, enable, role). Thin: the rules are
//! `service/users.rs`'s.

use std::sync::Arc;

use poem::Endpoint;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use crate::domain::{Email, Operation, RevocationReason, Role, Timestamp, ValidationErrors};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::http::fields::request_body;
use crate::http::idempotency::{Idempotent, Permitted, admin_permission};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::{AdminPage, Permission, Services, UserChange, UserOverview};
use crate::storage::{TokenRecord, User};

request_body! {
    /// Request body of user creation. No other properties are allowed.
    pub struct CreateUserInput {
        /// Unique within the organisation (409 otherwise); never written to the audit log.
        "email" => email: required Email,
        /// `operator` only by an operator (403 otherwise).
        "role" => role: default Role,
    }
}

/// A parsed user creation.
#[derive(Debug)]
pub struct NewUser {
    email: Email,
    role: Role,
}

impl FromJson for NewUser {
    type Body = CreateUserInput;

    fn from_body(body: CreateUserInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            email: body.email,
            role: body.role,
        })
    }
}

impl Permitted for NewUser {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::CreateUser, req)
    }
}

request_body! {
    /// Request body of disabling a user.
    pub struct DisableUserInput {
        /// Why; kept in the audit log.
        "reason" => reason: optional RevocationReason,
    }
}

#[derive(Debug)]
pub struct Disable {
    reason: Option<RevocationReason>,
}

impl FromJson for Disable {
    type Body = DisableUserInput;

    fn from_body(body: DisableUserInput) -> Result<Self, ValidationErrors> {
        Ok(Self {
            reason: body.reason,
        })
    }
}

impl Permitted for Disable {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::DisableUser, req)
    }
}

request_body! {
    /// Request body of enabling a user: an empty object.
    pub struct EnableUserInput {}
}

#[derive(Debug)]
pub struct Enable;

impl FromJson for Enable {
    type Body = EnableUserInput;

    fn from_body(_: EnableUserInput) -> Result<Self, ValidationErrors> {
        Ok(Self)
    }
}

impl Permitted for Enable {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::EnableUser, req)
    }
}

request_body! {
    /// Request body of a role change.
    pub struct SetUserRoleInput {
        /// Making an operator, or changing one, is an operator's (403 otherwise).
        "role" => role: required Role,
    }
}

#[derive(Debug)]
pub struct NewRole(Role);

impl FromJson for NewRole {
    type Body = SetUserRoleInput;

    fn from_body(body: SetUserRoleInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.role))
    }
}

impl Permitted for NewRole {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::SetUserRole, req)
    }
}

#[derive(Object)]
#[oai(rename = "User", rename_all = "camelCase")]
pub struct UserBody {
    id: Uuid,
    organisation_id: Uuid,
    email: String,
    role: Role,
    created_at: Timestamp,
    /// Set while the user is disabled: none of its tokens authenticates.
    #[oai(nullable)]
    disabled_at: Option<Timestamp>,
    #[oai(nullable)]
    disabled_reason: Option<String>,
}

impl From<User> for UserBody {
    fn from(u: User) -> Self {
        let (disabled_at, disabled_reason) = match u.disabled {
            Some(d) => (Some(d.at.into()), d.reason),
            None => (None, None),
        };
        Self {
            id: u.id,
            organisation_id: u.organisation_id,
            email: u.email,
            role: u.role,
            created_at: u.created_at.into(),
            disabled_at,
            disabled_reason,
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct UserEnvelope {
    user: UserBody,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct UserChangeEnvelope {
    user: UserBody,
    /// False when the user already was so: nothing was written and no event recorded.
    changed: bool,
}

impl From<UserChange> for UserChangeEnvelope {
    fn from(c: UserChange) -> Self {
        Self {
            user: c.user.into(),
            changed: c.changed,
        }
    }
}

#[derive(Object)]
#[oai(rename = "UserPage", rename_all = "camelCase")]
pub struct UserPageBody {
    /// In the order the users were created.
    items: Vec<UserBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    next_cursor: Option<String>,
}

/// A token as an administrator sees it: never its secret.
#[derive(Object)]
#[oai(rename = "TokenSummary", rename_all = "camelCase")]
pub struct TokenSummaryBody {
    id: Uuid,
    /// The token's non-secret leading part, as logs and listings show it.
    prefix: String,
    /// The user who holds it.
    user_id: Uuid,
    name: String,
    scopes: Vec<String>,
    /// Workspaces whose grant is still active.
    workspace_ids: Vec<Uuid>,
    environment_ids: Vec<Uuid>,
    created_at: Timestamp,
    expires_at: Timestamp,
    #[oai(nullable)]
    revoked_at: Option<Timestamp>,
    /// The token that issued this one; null when an administrator did.
    #[oai(nullable)]
    issued_by_token_id: Option<Uuid>,
    /// The last use recorded (at most about once a minute); null before the first.
    #[oai(nullable)]
    last_used_at: Option<Timestamp>,
    /// The client address of that use.
    #[oai(nullable)]
    last_used_from: Option<String>,
    /// The `User-Agent` of that use, when it sent one.
    #[oai(nullable)]
    last_used_user_agent: Option<String>,
}

impl From<TokenRecord> for TokenSummaryBody {
    fn from(t: TokenRecord) -> Self {
        Self {
            id: t.id,
            prefix: format!("{}{}", crate::domain::TOKEN_PREFIX, t.public_id),
            user_id: t.user_id,
            name: t.name,
            scopes: t.scopes,
            workspace_ids: t.workspace_ids,
            environment_ids: t.environment_ids,
            created_at: t.created_at.into(),
            expires_at: t.expires_at.into(),
            revoked_at: t.revoked_at.map(Timestamp::new),
            issued_by_token_id: t.issued_by_token_id,
            last_used_at: t.last_use.as_ref().map(|u| u.at.into()),
            last_used_user_agent: t.last_use.as_ref().and_then(|u| u.user_agent.clone()),
            last_used_from: t.last_use.map(|u| u.address),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct UserOverviewEnvelope {
    user: UserBody,
    /// Every token of the user, revoked and expired ones included, oldest first.
    tokens: Vec<TokenSummaryBody>,
}

impl From<UserOverview> for UserOverviewEnvelope {
    fn from(o: UserOverview) -> Self {
        Self {
            user: o.user.into(),
            tokens: o.tokens.into_iter().map(Into::into).collect(),
        }
    }
}

#[derive(ApiResponse)]
pub enum CreateUserResponse {
    /// The user was created.
    #[oai(status = 200)]
    Ok(Json<UserEnvelope>),
}

#[derive(ApiResponse)]
pub enum ListUsersResponse {
    #[oai(status = 200)]
    Ok(Json<UserPageBody>),
}

#[derive(ApiResponse)]
pub enum GetUserResponse {
    #[oai(status = 200)]
    Ok(Json<UserOverviewEnvelope>),
}

#[derive(ApiResponse)]
pub enum UserChangeResponse {
    /// The user as it is now.
    #[oai(status = 200)]
    Ok(Json<UserChangeEnvelope>),
}

error_responses!(CreateUserErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);
error_responses!(ReadUsersErrors: 400, 401, 403, 404, 413, 429, 500, 503);
error_responses!(ChangeUserErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

fn create_user(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::CreateUser, ep)
}

fn list_users(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ListUsers, ep)
}

fn get_user(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::GetUser, ep)
}

fn disable_user(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::DisableUser, ep)
}

fn enable_user(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::EnableUser, ep)
}

fn set_user_role(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::SetUserRole, ep)
}

pub struct UsersApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Admin")]
impl UsersApi {
    /// Create a user
    ///
    /// Requires `admin:write`, and a user who administers the organisation (its `admin`, or an
    /// `operator`). An unknown organisation, or one the caller does not administer, is a 404.
    #[oai(
        path = "/organisations/:organisationId/users",
        method = "post",
        operation_id = "createUser",
        transform = "create_user"
    )]
    async fn create(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        body: Idempotent<JsonBody<NewUser>>,
    ) -> Result<CreateUserResponse, CreateUserErrors> {
        let NewUser { email, role } = body.input.value;
        let user = services
            .admin_create_user(&auth.0, &organisation_id, &email, role, &body.write)
            .await?;
        let envelope = UserEnvelope { user: user.into() };
        Ok(CreateUserResponse::Ok(Json(envelope)))
    }

    /// List an organisation's users
    ///
    /// Requires `admin:read` and a user who administers the organisation. In the order they
    /// were created, at most `limit` per page.
    #[oai(
        path = "/organisations/:organisationId/users",
        method = "get",
        operation_id = "listUsers",
        transform = "list_users"
    )]
    async fn list(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        /// Page size, 1 to 200 (default 50).
        #[oai(validator(minimum(value = "1"), maximum(value = "200")))]
        limit: Query<Option<i64>>,
        /// Opaque cursor from a previous page's `nextCursor`. Empty is the same as absent.
        cursor: Query<Option<String>>,
    ) -> Result<ListUsersResponse, ReadUsersErrors> {
        let page = AdminPage::parse(limit.0, cursor.0.as_deref())
            .map_err(|e| ApiFailure::validation(&e.into()))?;
        let page = services
            .admin_list_users(&auth.0, &organisation_id, page)
            .await?;
        Ok(ListUsersResponse::Ok(Json(UserPageBody {
            items: page.items.into_iter().map(Into::into).collect(),
            next_cursor: page.next_cursor,
        })))
    }

    /// Show a user and its tokens
    ///
    /// Requires `admin:read` and a user who administers the organisation. Every token of the
    /// user, with its last use; never a secret. A user of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/users/:userId",
        method = "get",
        operation_id = "getUser",
        transform = "get_user"
    )]
    async fn show(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "userId")] user_id: Path<String>,
    ) -> Result<GetUserResponse, ReadUsersErrors> {
        let overview = services
            .admin_get_user(&auth.0, &organisation_id, &user_id)
            .await?;
        Ok(GetUserResponse::Ok(Json(overview.into())))
    }

    /// Disable a user
    ///
    /// Requires `admin:write` and a user who administers the organisation; an operator is
    /// disabled only by an operator. Every token of the user stops authenticating at once, on
    /// every replica, and its open audit streams end within a second; nothing of the tokens
    /// changes, so enabling the user brings back those still live. Disabling a disabled user
    /// changes nothing (`changed: false`).
    #[oai(
        path = "/organisations/:organisationId/users/:userId/disable",
        method = "post",
        operation_id = "disableUser",
        transform = "disable_user"
    )]
    async fn disable(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "userId")] user_id: Path<String>,
        body: Idempotent<JsonBody<Disable>>,
    ) -> Result<UserChangeResponse, ChangeUserErrors> {
        let reason = body.input.value.reason;
        let change = services
            .admin_disable_user(&auth.0, &organisation_id, &user_id, reason, &body.write)
            .await?;
        Ok(UserChangeResponse::Ok(Json(change.into())))
    }

    /// Enable a user
    ///
    /// Requires `admin:write` and a user who administers the organisation; an operator is
    /// enabled only by an operator. The user's tokens that are neither revoked nor expired
    /// authenticate again.
    #[oai(
        path = "/organisations/:organisationId/users/:userId/enable",
        method = "post",
        operation_id = "enableUser",
        transform = "enable_user"
    )]
    async fn enable(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "userId")] user_id: Path<String>,
        body: Idempotent<JsonBody<Enable>>,
    ) -> Result<UserChangeResponse, ChangeUserErrors> {
        let change = services
            .admin_enable_user(&auth.0, &organisation_id, &user_id, &body.write)
            .await?;
        Ok(UserChangeResponse::Ok(Json(change.into())))
    }

    /// Change a user's role
    ///
    /// Requires `admin:write` and a user who administers the organisation; making an operator,
    /// or changing one, is an operator's. Lowered, the user's tokens lose their admin scopes at
    /// their next request on every replica.
    #[oai(
        path = "/organisations/:organisationId/users/:userId/role",
        method = "put",
        operation_id = "setUserRole",
        transform = "set_user_role"
    )]
    async fn set_role(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "userId")] user_id: Path<String>,
        body: Idempotent<JsonBody<NewRole>>,
    ) -> Result<UserChangeResponse, ChangeUserErrors> {
        let NewRole(role) = body.input.value;
        let change = services
            .admin_set_user_role(&auth.0, &organisation_id, &user_id, role, &body.write)
            .await?;
        Ok(UserChangeResponse::Ok(Json(change.into())))
    }
}
