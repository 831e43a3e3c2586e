//! Organisations, workspaces and environments over the admin API, and what every admin
//! operation shares: its admission (the authorizer, then the route's organisation, 404 when it
//! does not exist) and its pages. Organisations are the operator's; an organisation's admin
//! creates and lists its workspaces and their environments (the default policy's role table).

use serde_json::Value;
use uuid::Uuid;

use super::permissions::admin_question;
use super::{Operation, ServiceError, Services};
use crate::domain::{FieldError, Principal, parse_uuid};
use crate::storage::{Environment, Organisation, User, Workspace, WriteContext};

/// A page request of the admin API: at most `limit` items in the order they were created,
/// after the item whose id is the cursor.
#[derive(Debug, Clone, Copy)]
pub struct AdminPage {
    limit: u32,
    after: Option<Uuid>,
}

impl AdminPage {
    pub const DEFAULT_LIMIT: u32 = 50;
    pub const MAX_LIMIT: u32 = 200;

    /// `cursor` is a previous page's `nextCursor` (the id of its last item); empty is absent.
    pub fn parse(limit: Option<i64>, cursor: Option<&str>) -> Result<Self, FieldError> {
        let limit = match limit {
            None => Self::DEFAULT_LIMIT,
            Some(n) if (1..=i64::from(Self::MAX_LIMIT)).contains(&n) => n as u32,
            Some(n) => {
                return Err(FieldError::new(
                    "limit",
                    format!("must be an integer from 1 to {}", Self::MAX_LIMIT),
                )
                .with_value(Value::from(n)));
            }
        };
        let after =
            match cursor.filter(|c| !c.is_empty()) {
                None => None,
                Some(c) => Some(parse_uuid(c).ok_or_else(|| {
                    FieldError::new("cursor", "is not a cursor this server issued")
                })?),
            };
        Ok(Self { limit, after })
    }

    /// Rows to read: one more than the page, which says whether another follows.
    pub(super) fn fetch(&self) -> u32 {
        self.limit + 1
    }

    pub(super) fn after(&self) -> Option<Uuid> {
        self.after
    }

    /// The page of `rows` (read with [`Self::fetch`]), its cursor the last item's id.
    pub(super) fn of<T>(&self, mut rows: Vec<T>, id: impl Fn(&T) -> Uuid) -> Paged<T> {
        let next_cursor = if rows.len() > self.limit as usize {
            rows.truncate(self.limit as usize);
            rows.last().map(|item| id(item).to_string())
        } else {
            None
        };
        Paged {
            items: rows,
            next_cursor,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Paged<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

impl Services {
    /// The authorizer's answer for an admin operation on the route's ids, then the
    /// organisation they name (404 when it does not exist).
    pub(super) async fn admit_admin(
        &self,
        principal: &Principal,
        operation: Operation,
        organisation: &str,
        target: Option<&str>,
    ) -> Result<Uuid, ServiceError> {
        let question = admin_question(operation, organisation, target);
        self.authorize(principal, operation, None, question).await?;
        let missing = || ServiceError::not_found("no such organisation");
        let id = parse_uuid(organisation).ok_or_else(missing)?;
        let found = self.store.lookup_targets(id, &[], &[]).await?;
        if !found.organisation_exists {
            return Err(missing());
        }
        Ok(id)
    }

    /// The user the route names, which must belong to its organisation.
    pub(super) async fn member_of(
        &self,
        organisation_id: Uuid,
        user: &str,
    ) -> Result<User, ServiceError> {
        let missing = || ServiceError::not_found("no such user in this organisation");
        let id = parse_uuid(user).ok_or_else(missing)?;
        self.store
            .get_user(id)
            .await?
            .filter(|u| u.organisation_id == organisation_id)
            .ok_or_else(missing)
    }

    /// The workspace the route names, which must belong to its organisation.
    pub(super) async fn workspace_of(
        &self,
        organisation_id: Uuid,
        workspace: &str,
    ) -> Result<Workspace, ServiceError> {
        let missing = || ServiceError::not_found("no such workspace in this organisation");
        let id = parse_uuid(workspace).ok_or_else(missing)?;
        self.store
            .get_workspace(id)
            .await?
            .filter(|w| w.organisation_id == organisation_id)
            .ok_or_else(missing)
    }

    pub async fn admin_create_organisation(
        &self,
        principal: &Principal,
        name: &str,
        write: &WriteContext,
    ) -> Result<Organisation, ServiceError> {
        self.authorize(principal, Operation::CreateOrganisation, None, vec![])
            .await?;
        self.add_organisation(name, write).await
    }

    pub async fn admin_list_organisations(
        &self,
        principal: &Principal,
        page: AdminPage,
    ) -> Result<Paged<Organisation>, ServiceError> {
        self.authorize(principal, Operation::ListOrganisations, None, vec![])
            .await?;
        let rows = self
            .store
            .organisations_page(page.after(), page.fetch())
            .await?;
        Ok(page.of(rows, |o| o.id))
    }

    pub async fn admin_create_workspace(
        &self,
        principal: &Principal,
        organisation: &str,
        name: &str,
        write: &WriteContext,
    ) -> Result<Workspace, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::CreateWorkspace, organisation, None)
            .await?;
        self.add_workspace(org, name, write).await
    }

    pub async fn admin_list_workspaces(
        &self,
        principal: &Principal,
        organisation: &str,
        page: AdminPage,
    ) -> Result<Paged<Workspace>, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::ListWorkspaces, organisation, None)
            .await?;
        let rows = self
            .store
            .workspaces_page(org, page.after(), page.fetch())
            .await?;
        Ok(page.of(rows, |w| w.id))
    }

    pub async fn admin_create_environment(
        &self,
        principal: &Principal,
        organisation: &str,
        workspace: &str,
        name: &str,
        write: &WriteContext,
    ) -> Result<Environment, ServiceError> {
        let operation = Operation::CreateEnvironment;
        let org = self
            .admit_admin(principal, operation, organisation, Some(workspace))
            .await?;
        let workspace = self.workspace_of(org, workspace).await?;
        self.add_environment(workspace.id, name, write).await
    }

    pub async fn admin_list_environments(
        &self,
        principal: &Principal,
        organisation: &str,
        workspace: &str,
        page: AdminPage,
    ) -> Result<Paged<Environment>, ServiceError> {
        let operation = Operation::ListEnvironments;
        let org = self
            .admit_admin(principal, operation, organisation, Some(workspace))
            .await?;
        let workspace = self.workspace_of(org, workspace).await?;
        let rows = self
            .store
            .environments_page(workspace.id, page.after(), page.fetch())
            .await?;
        Ok(page.of(rows, |e| e.id))
    }
}
