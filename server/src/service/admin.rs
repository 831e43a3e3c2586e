//! Organisations, workspaces, environments and users as the store verbs of cpctl make them
//! (bootstrap, recovery); the admin API's rules over them are `directory.rs` and `users.rs`.

use serde_json::json;
use uuid::Uuid;

use super::{IssueTokenInput, IssuedCredential, ServiceError, Services};
use crate::domain::{
    CorrelationId, Email, ExpiresInDays, FieldError, NewAuditEvent, Role, Scope, Scopes, TokenName,
    ValidationErrors,
};
use crate::storage::{Environment, Organisation, StoreError, User, Workspace, WriteContext};

const MAX_NAME_CHARS: usize = 120;

pub(super) fn parse_name(field: &str, raw: &str) -> Result<String, ServiceError> {
    let name = raw.trim();
    if name.contains('\0') || name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(ValidationErrors::from(FieldError::new(
            field,
            format!("must be 1 to {MAX_NAME_CHARS} characters"),
        ))
        .into());
    }
    Ok(name.to_owned())
}

fn parse_email(raw: &str) -> Result<String, ServiceError> {
    Email::parse(raw)
        .map(Email::into_string)
        .map_err(|e| ValidationErrors::from(FieldError::new("email", e.to_string())).into())
}

/// A user named on the command line: by id, or by email within an organisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserRef {
    Id(Uuid),
    Email(String),
}

impl UserRef {
    /// A uuid is an id; anything else must be an email address.
    pub fn parse(raw: &str) -> Result<Self, ServiceError> {
        match Uuid::parse_str(raw.trim()) {
            Ok(id) => Ok(Self::Id(id)),
            Err(_) => parse_email(raw).map(Self::Email),
        }
    }
}

/// A uniqueness conflict becomes a message that names the thing that exists.
pub(super) fn already_exists(what: String) -> impl FnOnce(StoreError) -> ServiceError {
    move |e| match e {
        StoreError::Conflict(_) => ServiceError::Conflict {
            code: "conflict",
            message: what,
            details: None,
        },
        other => other.into(),
    }
}

/// An event of a change written with `write`: its actor (the user and token over HTTP) and
/// correlation id.
pub(super) fn event_by(
    write: &WriteContext,
    organisation_id: Uuid,
    workspace_id: Option<Uuid>,
    event_type: &'static str,
    target_kind: &'static str,
    target_id: Uuid,
    data: serde_json::Value,
) -> NewAuditEvent {
    NewAuditEvent {
        organisation_id,
        workspace_id,
        event_type,
        actor: write.actor(),
        target_kind,
        target_id,
        correlation_id: write.correlation_id().to_string(),
        occurred_at: Services::now(),
        data,
    }
}

#[derive(Debug, Clone)]
pub struct BootstrapInput {
    pub organisation: String,
    pub workspace: String,
    pub admin_email: String,
    pub expires_in_days: ExpiresInDays,
}

#[derive(Debug, Clone)]
pub struct Bootstrap {
    pub organisation: Organisation,
    pub workspace: Workspace,
    pub user: User,
    pub credential: IssuedCredential,
}

impl Services {
    pub async fn create_organisation(
        &self,
        name: &str,
        cid: &CorrelationId,
    ) -> Result<Organisation, ServiceError> {
        self.add_organisation(name, &WriteContext::admin(cid)).await
    }

    pub(super) async fn add_organisation(
        &self,
        name: &str,
        write: &WriteContext,
    ) -> Result<Organisation, ServiceError> {
        let org = Organisation {
            id: Uuid::new_v4(),
            name: parse_name("name", name)?,
            created_at: Self::now(),
        };
        let event = event_by(
            write,
            org.id,
            None,
            "organisation.created",
            "organisation",
            org.id,
            json!({ "name": org.name }),
        );
        self.store
            .create_organisation(write, &org, &event)
            .await
            .map_err(already_exists(format!(
                "an organisation named {:?} already exists",
                org.name
            )))?;
        Ok(org)
    }

    pub async fn list_organisations(&self) -> Result<Vec<Organisation>, ServiceError> {
        Ok(self.store.list_organisations().await?)
    }

    pub async fn create_workspace(
        &self,
        organisation_id: Uuid,
        name: &str,
        cid: &CorrelationId,
    ) -> Result<Workspace, ServiceError> {
        self.add_workspace(organisation_id, name, &WriteContext::admin(cid))
            .await
    }

    pub(super) async fn add_workspace(
        &self,
        organisation_id: Uuid,
        name: &str,
        write: &WriteContext,
    ) -> Result<Workspace, ServiceError> {
        let ws = Workspace {
            id: Uuid::new_v4(),
            organisation_id,
            name: parse_name("name", name)?,
            created_at: Self::now(),
        };
        self.require_organisation(organisation_id).await?;
        let event = event_by(
            write,
            organisation_id,
            Some(ws.id),
            "workspace.created",
            "workspace",
            ws.id,
            json!({ "name": ws.name }),
        );
        self.store
            .create_workspace(write, &ws, &event)
            .await
            .map_err(already_exists(format!(
                "a workspace named {:?} already exists in this organisation",
                ws.name
            )))?;
        Ok(ws)
    }

    pub async fn list_workspaces(
        &self,
        organisation_id: Option<Uuid>,
    ) -> Result<Vec<Workspace>, ServiceError> {
        Ok(self.store.list_workspaces(organisation_id).await?)
    }

    pub async fn create_environment(
        &self,
        workspace_id: Uuid,
        name: &str,
        cid: &CorrelationId,
    ) -> Result<Environment, ServiceError> {
        self.add_environment(workspace_id, name, &WriteContext::admin(cid))
            .await
    }

    pub(super) async fn add_environment(
        &self,
        workspace_id: Uuid,
        name: &str,
        write: &WriteContext,
    ) -> Result<Environment, ServiceError> {
        let env = Environment {
            id: Uuid::new_v4(),
            workspace_id,
            name: parse_name("name", name)?,
            created_at: Self::now(),
        };
        let workspace = self.workspace(workspace_id).await?;
        let event = event_by(
            write,
            workspace.organisation_id,
            Some(workspace_id),
            "environment.created",
            "environment",
            env.id,
            json!({ "name": env.name }),
        );
        self.store
            .create_environment(write, &env, &event)
            .await
            .map_err(already_exists(format!(
                "an environment named {:?} already exists in this workspace",
                env.name
            )))?;
        Ok(env)
    }

    pub async fn list_environments(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<Environment>, ServiceError> {
        Ok(self.store.list_environments(workspace_id).await?)
    }

    pub async fn create_user(
        &self,
        organisation_id: Uuid,
        email: &str,
        cid: &CorrelationId,
    ) -> Result<User, ServiceError> {
        self.create_user_as(organisation_id, email, Role::Member, cid)
            .await
    }

    /// A user with `role` (an admin or operator may decide approvals and hold admin scopes).
    pub async fn create_user_as(
        &self,
        organisation_id: Uuid,
        email: &str,
        role: Role,
        cid: &CorrelationId,
    ) -> Result<User, ServiceError> {
        self.add_user(organisation_id, email, role, &WriteContext::admin(cid))
            .await
    }

    /// Creates the user and its `user.created` event, written with `write`.
    pub(super) async fn add_user(
        &self,
        organisation_id: Uuid,
        email: &str,
        role: Role,
        write: &WriteContext,
    ) -> Result<User, ServiceError> {
        let user = User {
            id: Uuid::new_v4(),
            organisation_id,
            email: parse_email(email)?,
            created_at: Self::now(),
            role,
            disabled: None,
        };
        self.require_organisation(organisation_id).await?;
        // The email is personal data: the event names the user by id only.
        let event = event_by(
            write,
            organisation_id,
            None,
            "user.created",
            "user",
            user.id,
            json!({ "role": user.role.as_str() }),
        );
        self.store
            .create_user(write, &user, &event)
            .await
            .map_err(already_exists(
                "a user with this email already exists in this organisation".into(),
            ))?;
        Ok(user)
    }

    pub async fn list_users(
        &self,
        organisation_id: Option<Uuid>,
    ) -> Result<Vec<User>, ServiceError> {
        Ok(self.store.list_users(organisation_id).await?)
    }

    /// The user a reference names in an organisation; a user of another organisation is the
    /// same 404 as one that does not exist.
    pub async fn find_user(
        &self,
        organisation_id: Uuid,
        user: &UserRef,
    ) -> Result<User, ServiceError> {
        let found = match user {
            UserRef::Id(id) => self.store.get_user(*id).await?,
            UserRef::Email(email) => {
                self.store
                    .find_user_by_email(organisation_id, email)
                    .await?
            }
        };
        found
            .filter(|u| u.organisation_id == organisation_id)
            .ok_or_else(|| ServiceError::not_found("no such user in this organisation"))
    }

    pub async fn get_user(&self, id: Uuid) -> Result<User, ServiceError> {
        self.store
            .get_user(id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such user"))
    }

    async fn require_organisation(&self, id: Uuid) -> Result<(), ServiceError> {
        let found = self.store.lookup_targets(id, &[], &[]).await?;
        if found.organisation_exists {
            Ok(())
        } else {
            Err(ServiceError::not_found("no such organisation"))
        }
    }

    /// A first organisation, workspace and its user, the instance's operator, and a token
    /// holding every scope on it.
    pub async fn bootstrap(
        &self,
        input: BootstrapInput,
        cid: &CorrelationId,
    ) -> Result<Bootstrap, ServiceError> {
        let email = parse_email(&input.admin_email)?;
        let workspace_name = parse_name("workspace", &input.workspace)?;
        let organisation = self.create_organisation(&input.organisation, cid).await?;
        let workspace = self
            .create_workspace(organisation.id, &workspace_name, cid)
            .await?;
        let user = self
            .create_user_as(organisation.id, &email, Role::Operator, cid)
            .await?;
        let name =
            TokenName::parse("bootstrap").map_err(|e| ServiceError::Internal(e.to_string()))?;
        let request = IssueTokenInput::new(
            name,
            Scopes::all(),
            organisation.id,
            vec![workspace.id],
            vec![],
            input.expires_in_days,
        )?;
        let credential = self.issue_token_for_user(user.id, request, cid).await?;
        Ok(Bootstrap {
            organisation,
            workspace,
            user,
            credential,
        })
    }

    /// `cpctl recover`: a new token for an existing operator, for whoever holds the records
    /// store when every operator token is lost (the admin API cannot help without one). It
    /// holds only `admin:read` and `admin:write`, on the first workspace of the operator's
    /// organisation (a token needs one), so the operator issues itself what it needs over
    /// HTTP; it is audited as any store-side issuance. A disabled or non-operator user is
    /// refused: recovery gives back access, never a role.
    pub async fn recover_operator(
        &self,
        email: &str,
        expires_in_days: ExpiresInDays,
        cid: &CorrelationId,
    ) -> Result<(User, IssuedCredential), ServiceError> {
        let email = parse_email(email)?;
        // A rare command: one pass over the users beats a port of its own.
        let user = self
            .store
            .list_users(None)
            .await?
            .into_iter()
            .find(|u| u.role == Role::Operator && u.email.eq_ignore_ascii_case(&email))
            .ok_or_else(|| ServiceError::not_found("no operator has that email"))?;
        super::admin_tokens::not_disabled(&user)?;
        let workspace = self
            .store
            .list_workspaces(Some(user.organisation_id))
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| {
                ServiceError::not_found("the operator's organisation has no workspace")
            })?;
        let name =
            TokenName::parse("recovery").map_err(|e| ServiceError::Internal(e.to_string()))?;
        let scopes: Scopes = [Scope::AdminRead, Scope::AdminWrite].into_iter().collect();
        let request = IssueTokenInput::new(
            name,
            scopes,
            user.organisation_id,
            vec![workspace.id],
            vec![],
            expires_in_days,
        )?;
        let credential = self.issue_token_for_user(user.id, request, cid).await?;
        Ok((user, credential))
    }
}
