//! An organisation's users over the admin API: create, list, show, disable, enable and change
//! role. The authorizer decides each first (the default policy's role table: an admin acts on
//! its own organisation, an operator on every one); then the rules written once here: the
//! route's organisation must exist and hold the user (else the same 404 as a user that does not
//! exist), and a change that touches an operator (making one, or changing or disabling one) is
//! an operator's own (403). Events name the user and token that acted (`event_by`).

use super::directory::{AdminPage, Paged};
use super::{Operation, ServiceError, Services, UserChange, UserOverview};
use crate::domain::{Email, Principal, RevocationReason, Role};
use crate::storage::{User, WriteContext};

/// Whether `principal` may make this change to `target` (and give it `role`): one that touches
/// an operator is an operator's. Only an operator makes operators (docs/design.md, "Roles").
fn may_change(
    principal: &Principal,
    target: &User,
    role: Option<Role>,
) -> Result<(), ServiceError> {
    let touches_operator = target.role == Role::Operator || role == Some(Role::Operator);
    if touches_operator && principal.role != Role::Operator {
        return Err(ServiceError::forbidden(
            "only an operator changes an operator or makes one",
        ));
    }
    Ok(())
}

impl Services {
    pub async fn admin_create_user(
        &self,
        principal: &Principal,
        organisation: &str,
        email: &Email,
        role: Role,
        write: &WriteContext,
    ) -> Result<User, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::CreateUser, organisation, None)
            .await?;
        if role == Role::Operator && principal.role != Role::Operator {
            return Err(ServiceError::forbidden("only an operator makes operators"));
        }
        self.add_user(org, email.as_str(), role, write).await
    }

    pub async fn admin_list_users(
        &self,
        principal: &Principal,
        organisation: &str,
        page: AdminPage,
    ) -> Result<Paged<User>, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::ListUsers, organisation, None)
            .await?;
        let rows = self
            .store
            .users_page(org, page.after(), page.fetch())
            .await?;
        Ok(page.of(rows, |u| u.id))
    }

    /// The user and every token it holds, revoked and expired ones included, with last use.
    pub async fn admin_get_user(
        &self,
        principal: &Principal,
        organisation: &str,
        user: &str,
    ) -> Result<UserOverview, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::GetUser, organisation, Some(user))
            .await?;
        let user = self.member_of(org, user).await?;
        self.user_overview(user.id).await
    }

    pub async fn admin_disable_user(
        &self,
        principal: &Principal,
        organisation: &str,
        user: &str,
        reason: Option<RevocationReason>,
        write: &WriteContext,
    ) -> Result<UserChange, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::DisableUser, organisation, Some(user))
            .await?;
        let user = self.member_of(org, user).await?;
        may_change(principal, &user, None)?;
        self.disable(user, reason, write).await
    }

    pub async fn admin_enable_user(
        &self,
        principal: &Principal,
        organisation: &str,
        user: &str,
        write: &WriteContext,
    ) -> Result<UserChange, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::EnableUser, organisation, Some(user))
            .await?;
        let user = self.member_of(org, user).await?;
        may_change(principal, &user, None)?;
        self.enable(user, write).await
    }

    pub async fn admin_set_user_role(
        &self,
        principal: &Principal,
        organisation: &str,
        user: &str,
        role: Role,
        write: &WriteContext,
    ) -> Result<UserChange, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::SetUserRole, organisation, Some(user))
            .await?;
        let user = self.member_of(org, user).await?;
        may_change(principal, &user, Some(role))?;
        self.assign_role(user, role, write).await
    }
}
