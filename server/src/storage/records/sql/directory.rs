//! Organisations, workspaces, environments and users (shared by both SQL adapters; see the
//! layout in `storage/mod.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::ListParam;
use crate::domain::{NewAuditEvent, Role};
use crate::storage::records::dialect::Dialect;
use crate::storage::{
    DirectoryStore, Environment, Organisation, StoreError, TargetLookup, User, UserDisabled,
    Workspace, WriteContext,
};

#[async_trait]
impl<S: Dialect> DirectoryStore for S {
    async fn create_organisation(
        &self,
        write: &WriteContext,
        org: &Organisation,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query("INSERT INTO organisations (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(org.id)
            .bind(&org.name)
            .bind(org.created_at)
            .execute(&mut *tx)
            .await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn list_organisations(&self) -> Result<Vec<Organisation>, StoreError> {
        let rows: Vec<(Uuid, String, DateTime<Utc>)> =
            S::query("SELECT id, name, created_at FROM organisations ORDER BY created_at, name")
                .fetch_all(self.pool())
                .await?;
        Ok(rows
            .into_iter()
            .map(|(id, name, created_at)| Organisation {
                id,
                name,
                created_at,
            })
            .collect())
    }

    async fn organisations_page(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Organisation>, StoreError> {
        let rows: Vec<(Uuid, String, DateTime<Utc>)> = S::query(
            "SELECT id, name, created_at FROM organisations
             WHERE $1 IS NULL OR (created_at, id) > (SELECT created_at, id FROM organisations WHERE id = $1)
             ORDER BY created_at, id LIMIT $2",
        )
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, name, created_at)| Organisation {
                id,
                name,
                created_at,
            })
            .collect())
    }

    async fn workspaces_page(
        &self,
        organisation_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Workspace>, StoreError> {
        let rows: Vec<(Uuid, Uuid, String, DateTime<Utc>)> = S::query(
            "SELECT id, organisation_id, name, created_at FROM workspaces
             WHERE organisation_id = $1
               AND ($2 IS NULL OR (created_at, id) > (SELECT created_at, id FROM workspaces WHERE id = $2))
             ORDER BY created_at, id LIMIT $3",
        )
        .bind(organisation_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(workspace).collect())
    }

    async fn environments_page(
        &self,
        workspace_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Environment>, StoreError> {
        let rows: Vec<(Uuid, Uuid, String, DateTime<Utc>)> = S::query(
            "SELECT id, workspace_id, name, created_at FROM environments
             WHERE workspace_id = $1
               AND ($2 IS NULL OR (created_at, id) > (SELECT created_at, id FROM environments WHERE id = $2))
             ORDER BY created_at, id LIMIT $3",
        )
        .bind(workspace_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, workspace_id, name, created_at)| Environment {
                id,
                workspace_id,
                name,
                created_at,
            })
            .collect())
    }

    async fn create_workspace(
        &self,
        write: &WriteContext,
        ws: &Workspace,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query(
            "INSERT INTO workspaces (id, organisation_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(ws.id)
        .bind(ws.organisation_id)
        .bind(&ws.name)
        .bind(ws.created_at)
        .execute(&mut *tx)
        .await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn list_workspaces(
        &self,
        organisation_id: Option<Uuid>,
    ) -> Result<Vec<Workspace>, StoreError> {
        let rows: Vec<(Uuid, Uuid, String, DateTime<Utc>)> = S::query(
            "SELECT id, organisation_id, name, created_at FROM workspaces
             WHERE $1 IS NULL OR organisation_id = $1 ORDER BY created_at, name",
        )
        .bind(organisation_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(workspace).collect())
    }

    async fn create_environment(
        &self,
        write: &WriteContext,
        env: &Environment,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query(
            "INSERT INTO environments (id, workspace_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(env.id)
        .bind(env.workspace_id)
        .bind(&env.name)
        .bind(env.created_at)
        .execute(&mut *tx)
        .await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn list_environments(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<Environment>, StoreError> {
        let rows: Vec<(Uuid, Uuid, String, DateTime<Utc>)> = S::query(
            "SELECT id, workspace_id, name, created_at FROM environments
             WHERE $1 IS NULL OR workspace_id = $1 ORDER BY created_at, name",
        )
        .bind(workspace_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, workspace_id, name, created_at)| Environment {
                id,
                workspace_id,
                name,
                created_at,
            })
            .collect())
    }

    async fn create_user(
        &self,
        write: &WriteContext,
        user: &User,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query(
            "INSERT INTO users (id, organisation_id, email, created_at, role)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(user.id)
        .bind(user.organisation_id)
        .bind(&user.email)
        .bind(user.created_at)
        .bind(user.role.as_str())
        .execute(&mut *tx)
        .await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn list_users(&self, organisation_id: Option<Uuid>) -> Result<Vec<User>, StoreError> {
        let rows: Vec<UserRow> = S::query(
            "SELECT id, organisation_id, email, created_at, role, disabled_at, disabled_reason FROM users
             WHERE $1 IS NULL OR organisation_id = $1 ORDER BY created_at, email",
        )
        .bind(organisation_id)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(user).collect()
    }

    async fn users_page(
        &self,
        organisation_id: Uuid,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<User>, StoreError> {
        // Keyset on (created_at, id): a page costs its own rows whatever its depth, and a user
        // created meanwhile lands on a later page, never shifting an earlier one.
        let rows: Vec<UserRow> = S::query(
            "SELECT id, organisation_id, email, created_at, role, disabled_at, disabled_reason
             FROM users
             WHERE organisation_id = $1
               AND ($2 IS NULL OR (created_at, id) > (SELECT created_at, id FROM users WHERE id = $2))
             ORDER BY created_at, id LIMIT $3",
        )
        .bind(organisation_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(user).collect()
    }

    async fn get_user(&self, id: Uuid) -> Result<Option<User>, StoreError> {
        let row: Option<UserRow> = S::query(
            "SELECT id, organisation_id, email, created_at, role, disabled_at, disabled_reason FROM users WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.map(user).transpose()
    }

    async fn set_user_disabled(
        &self,
        write: &WriteContext,
        user_id: Uuid,
        disabled: Option<&UserDisabled>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        // The state it changes from is in the WHERE: of two concurrent disables, one changes it.
        let done = match disabled {
            Some(d) => {
                S::query(
                    "UPDATE users SET disabled_at = $2, disabled_reason = $3
                     WHERE id = $1 AND disabled_at IS NULL",
                )
                .bind(user_id)
                .bind(d.at)
                .bind(d.reason.as_deref())
                .execute(&mut *tx)
                .await?
            }
            None => {
                S::query(
                    "UPDATE users SET disabled_at = NULL, disabled_reason = NULL
                     WHERE id = $1 AND disabled_at IS NOT NULL",
                )
                .bind(user_id)
                .execute(&mut *tx)
                .await?
            }
        };
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn set_user_role(
        &self,
        write: &WriteContext,
        user_id: Uuid,
        from: Role,
        to: Role,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        if from == to {
            return Ok(false);
        }
        let mut tx = self.begin(write).await?;
        // As with disabling: the role it changes from is in the WHERE.
        let done = S::query("UPDATE users SET role = $3 WHERE id = $1 AND role = $2")
            .bind(user_id)
            .bind(from.as_str())
            .bind(to.as_str())
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn find_user_by_email(
        &self,
        organisation_id: Uuid,
        email: &str,
    ) -> Result<Option<User>, StoreError> {
        let row: Option<UserRow> = S::query(
            "SELECT id, organisation_id, email, created_at, role, disabled_at, disabled_reason FROM users
             WHERE organisation_id = $1 AND email = $2",
        )
        .bind(organisation_id)
        .bind(email)
        .fetch_optional(self.pool())
        .await?;
        row.map(user).transpose()
    }

    async fn get_workspace(&self, id: Uuid) -> Result<Option<Workspace>, StoreError> {
        let row: Option<(Uuid, Uuid, String, DateTime<Utc>)> =
            S::query("SELECT id, organisation_id, name, created_at FROM workspaces WHERE id = $1")
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(workspace))
    }

    async fn lookup_targets(
        &self,
        organisation_id: Uuid,
        workspace_ids: &[Uuid],
        environment_ids: &[Uuid],
    ) -> Result<TargetLookup, StoreError> {
        // One row per thing found: (0, organisation), (1, workspace, its organisation),
        // (2, environment, its workspace).
        let query = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT CAST(0 AS BIGINT) AS k, id, id AS parent FROM organisations WHERE id = $1
             UNION ALL
             SELECT 1, id, organisation_id FROM workspaces WHERE id {}
             UNION ALL
             SELECT 2, id, workspace_id FROM environments WHERE id {}
             ORDER BY k, id",
            S::in_uuid_list("$2"),
            S::in_uuid_list("$3"),
        )))
        .bind(organisation_id)
        .bind(ListParam(workspace_ids))
        .bind(ListParam(environment_ids));
        // Every issuance resolves its targets first: a request-path read.
        let rows: Vec<(i64, Uuid, Uuid)> = self.read_all(query).await?;
        let mut lookup = TargetLookup::default();
        for (kind, id, parent) in rows {
            match kind {
                0 => lookup.organisation_exists = true,
                1 => lookup.workspaces.push((id, parent)),
                _ => lookup.environments.push((id, parent)),
            }
        }
        Ok(lookup)
    }
}

fn workspace(
    (id, organisation_id, name, created_at): (Uuid, Uuid, String, DateTime<Utc>),
) -> Workspace {
    Workspace {
        id,
        organisation_id,
        name,
        created_at,
    }
}

type UserRow = (
    Uuid,
    Uuid,
    String,
    DateTime<Utc>,
    String,
    Option<DateTime<Utc>>,
    Option<String>,
);

fn user(
    (id, organisation_id, email, created_at, role, disabled_at, disabled_reason): UserRow,
) -> Result<User, StoreError> {
    let role = Role::parse(&role)
        .map_err(|_| StoreError::Internal(format!("user {id} has the unknown role {role:?}")))?;
    Ok(User {
        id,
        organisation_id,
        email,
        created_at,
        role,
        disabled: disabled_at.map(|at| UserDisabled {
            at,
            reason: disabled_reason,
        }),
    })
}
