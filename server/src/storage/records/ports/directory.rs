//! Organisations, workspaces, environments and users.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{NewAuditEvent, Role};
use crate::storage::StoreError;
use crate::storage::WriteContext;

#[derive(Debug, Clone, PartialEq)]
pub struct Organisation {
    pub id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Workspace {
    pub id: Uuid,
    pub organisation_id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Environment {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct User {
    pub id: Uuid,
    pub organisation_id: Uuid,
    pub email: String,
    pub created_at: DateTime<Utc>,
    /// What the user administers (`Role::administers`: decides workflow approvals, may hold
    /// the admin scopes).
    pub role: Role,
    /// Set by `cpctl users disable`: none of the user's tokens authenticates meanwhile.
    pub disabled: Option<UserDisabled>,
}

/// When and why a user was disabled.
#[derive(Debug, Clone, PartialEq)]
pub struct UserDisabled {
    pub at: DateTime<Utc>,
    pub reason: Option<String>,
}

/// Which of the referenced organisation, workspaces and environments exist, and where.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetLookup {
    pub organisation_exists: bool,
    /// (workspace id, its organisation id)
    pub workspaces: Vec<(Uuid, Uuid)>,
    /// (environment id, its workspace id)
    pub environments: Vec<(Uuid, Uuid)>,
}

/// Organisations, workspaces, environments and users: created by the admin CLI.
#[async_trait]
pub trait DirectoryStore: Send + Sync {
    async fn create_organisation(
        &self,
        write: &WriteContext,
        org: &Organisation,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_organisations(&self) -> Result<Vec<Organisation>, StoreError>;
    /// The pages of the admin API: up to `limit` in the order they were created, after the
    /// one with id `after` (the last of the previous page), as [`Self::users_page`].
    async fn organisations_page(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Organisation>, StoreError>;
    async fn workspaces_page(
        &self,
        organisation_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Workspace>, StoreError>;
    async fn environments_page(
        &self,
        workspace_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Environment>, StoreError>;
    async fn create_workspace(
        &self,
        write: &WriteContext,
        ws: &Workspace,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_workspaces(
        &self,
        organisation_id: Option<Uuid>,
    ) -> Result<Vec<Workspace>, StoreError>;
    async fn create_environment(
        &self,
        write: &WriteContext,
        env: &Environment,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_environments(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<Environment>, StoreError>;
    async fn create_user(
        &self,
        write: &WriteContext,
        user: &User,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
    async fn list_users(&self, organisation_id: Option<Uuid>) -> Result<Vec<User>, StoreError>;
    /// Up to `limit` users of the organisation in the order they were created, after the user
    /// `after` (the last of the previous page).
    async fn users_page(
        &self,
        organisation_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<User>, StoreError>;
    async fn get_user(&self, id: Uuid) -> Result<Option<User>, StoreError>;
    /// Disables (`Some`) or enables (`None`) the user and writes `event`, unless it already is
    /// so: then nothing is written and the answer is `false`.
    async fn set_user_disabled(
        &self,
        write: &WriteContext,
        user_id: Uuid,
        disabled: Option<&UserDisabled>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError>;
    /// Sets the user's role from `from` to `to` and writes `event`, unless its role is not
    /// `from` (a concurrent change went first, or it already is `to`): then nothing is written
    /// and the answer is `false`.
    async fn set_user_role(
        &self,
        write: &WriteContext,
        user_id: Uuid,
        from: Role,
        to: Role,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError>;
    /// The user of that organisation with that email (emails are unique per organisation).
    async fn find_user_by_email(
        &self,
        organisation_id: Uuid,
        email: &str,
    ) -> Result<Option<User>, StoreError>;
    async fn get_workspace(&self, id: Uuid) -> Result<Option<Workspace>, StoreError>;
    async fn lookup_targets(
        &self,
        organisation_id: Uuid,
        workspace_ids: &[Uuid],
        environment_ids: &[Uuid],
    ) -> Result<TargetLookup, StoreError>;
}
