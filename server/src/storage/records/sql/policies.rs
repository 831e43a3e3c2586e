//! Policy versions, activations and shadows (shared by both SQL adapters; see the layout in
//! `storage/mod.rs`). Every change calls the adapter's `policy_changed`, which bumps the
//! generation (and on Postgres notifies the other replicas).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::NewAuditEvent;
use crate::policy::Instances;
use crate::storage::records::dialect::Dialect;
use crate::storage::records::rows::{POLICY_COLUMNS, PolicyRow};
use crate::storage::{
    DisagreementRecord, PolicyEvent, PolicyRecord, PolicyState, PolicyStore, StoreError,
    WriteContext,
};

async fn policy_by_id<S: Dialect>(
    store: &S,
    id: Option<Uuid>,
) -> Result<Option<PolicyRecord>, StoreError> {
    let Some(id) = id else { return Ok(None) };
    let row: Option<PolicyRow> = S::query(sqlx::AssertSqlSafe(format!(
        "SELECT {POLICY_COLUMNS} FROM policies WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(store.pool())
    .await?;
    row.map(TryInto::try_into).transpose()
}

#[async_trait]
impl<S: Dialect> PolicyStore for S {
    async fn insert_policy(
        &self,
        write: &WriteContext,
        name: &str,
        kind: &str,
        digest: &str,
        bytes: &[u8],
        instances: Instances,
        budget: &crate::storage::PolicyBudgetRecord,
        event: PolicyEvent<'_>,
    ) -> Result<PolicyRecord, StoreError> {
        let mut tx = self.begin(write).await?;
        S::serialise_versions(&mut tx, name).await?;
        let row: PolicyRow = S::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO policies (id, name, kind, version, digest, bytes, created_at, instances)
             VALUES ($1, $2, $3, (SELECT coalesce(max(version), 0) + 1 FROM policies WHERE name = $2),
                 $4, $5, $6, $7)
             RETURNING {POLICY_COLUMNS}"
        )))
        .bind(Uuid::new_v4())
        .bind(name)
        .bind(kind)
        .bind(digest)
        .bind(bytes)
        .bind(Utc::now())
        .bind(instances.as_str())
        .fetch_one(&mut *tx)
        .await?;
        super::policy_budgets::insert_budget::<S>(&mut tx, row.id, budget).await?;
        let policy = PolicyRecord::try_from(row)?;
        S::insert_event(&mut tx, &event(&policy)).await?;
        self.commit(tx, write).await?;
        Ok(policy)
    }

    async fn list_policies(&self) -> Result<Vec<PolicyRecord>, StoreError> {
        let rows: Vec<PolicyRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {POLICY_COLUMNS} FROM policies ORDER BY name, version"
        )))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn policies_page(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<PolicyRecord>, StoreError> {
        // A cursor whose version was removed meanwhile has no place: the listing ends there.
        let rows: Vec<PolicyRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {POLICY_COLUMNS} FROM policies
             WHERE $1 IS NULL
                OR name > (SELECT name FROM policies WHERE id = $1)
                OR (name = (SELECT name FROM policies WHERE id = $1)
                    AND version > (SELECT version FROM policies WHERE id = $1))
             ORDER BY name, version
             LIMIT $2"
        )))
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn find_policy(
        &self,
        name: &str,
        version: i32,
    ) -> Result<Option<PolicyRecord>, StoreError> {
        let row: Option<PolicyRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {POLICY_COLUMNS} FROM policies WHERE name = $1 AND version = $2"
        )))
        .bind(name)
        .bind(version)
        .fetch_optional(self.pool())
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn policy_bytes(&self, id: Uuid) -> Result<Option<Vec<u8>>, StoreError> {
        let row: Option<(Vec<u8>,)> = S::query("SELECT bytes FROM policies WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.map(|(b,)| b))
    }

    async fn activate_policy(
        &self,
        write: &WriteContext,
        policy: &PolicyRecord,
        forced: bool,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query(
            "INSERT INTO policy_activations (kind, policy_id, activated_at, forced)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(&policy.kind)
        .bind(policy.id)
        .bind(Utc::now())
        .bind(forced)
        .execute(&mut *tx)
        .await?;
        S::policy_changed(&mut tx).await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn rollback_policy(
        &self,
        write: &WriteContext,
        kind: &str,
        event: PolicyEvent<'_>,
    ) -> Result<Option<Option<PolicyRecord>>, StoreError> {
        let mut tx = self.begin(write).await?;
        let undone: Option<(Uuid,)> = S::query(
            "UPDATE policy_activations SET rolled_back = true
             WHERE id = (SELECT id FROM policy_activations WHERE kind = $1 AND NOT rolled_back
                         ORDER BY id DESC LIMIT 1)
             RETURNING policy_id",
        )
        .bind(kind)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((policy_id,)) = undone else {
            return Ok(None);
        };
        let row: PolicyRow = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {POLICY_COLUMNS} FROM policies WHERE id = $1"
        )))
        .bind(policy_id)
        .fetch_one(&mut *tx)
        .await?;
        let now: Option<PolicyRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {POLICY_COLUMNS} FROM policies WHERE id =
                 (SELECT policy_id FROM policy_activations WHERE kind = $1 AND NOT rolled_back
                  ORDER BY id DESC LIMIT 1)"
        )))
        .bind(kind)
        .fetch_optional(&mut *tx)
        .await?;
        let now = now.map(PolicyRecord::try_from).transpose()?;
        S::policy_changed(&mut tx).await?;
        S::insert_event(&mut tx, &event(&row.try_into()?)).await?;
        self.commit(tx, write).await?;
        Ok(Some(now))
    }

    async fn remove_policy(
        &self,
        write: &WriteContext,
        id: Uuid,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        let removed = S::query(
            "DELETE FROM policies WHERE id = $1
               AND NOT EXISTS (SELECT 1 FROM policy_activations WHERE policy_id = $1)
               AND NOT EXISTS (SELECT 1 FROM policy_shadows WHERE policy_id = $1)",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if removed != 1 {
            return Ok(false);
        }
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn set_shadow(
        &self,
        write: &WriteContext,
        kind: &str,
        policy: Option<&PolicyRecord>,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query("DELETE FROM policy_shadows WHERE kind = $1")
            .bind(kind)
            .execute(&mut *tx)
            .await?;
        if let Some(policy) = policy {
            S::query(
                "INSERT INTO policy_shadows (kind, policy_id, started_at) VALUES ($1, $2, $3)",
            )
            .bind(kind)
            .bind(policy.id)
            .bind(Utc::now())
            .execute(&mut *tx)
            .await?;
        }
        S::policy_changed(&mut tx).await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn policy_state(&self) -> Result<PolicyState, StoreError> {
        let (generation, authorizer, moderator, shadow): (
            i64,
            Option<Uuid>,
            Option<Uuid>,
            Option<Uuid>,
        ) = S::query(
            "SELECT (SELECT generation FROM policy_state WHERE id = 1),
                    (SELECT policy_id FROM policy_activations
                     WHERE kind = 'authorizer' AND NOT rolled_back ORDER BY id DESC LIMIT 1),
                    (SELECT policy_id FROM policy_activations
                     WHERE kind = 'moderator' AND NOT rolled_back ORDER BY id DESC LIMIT 1),
                    (SELECT policy_id FROM policy_shadows WHERE kind = 'authorizer')",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(PolicyState {
            generation,
            authorizer: policy_by_id(self, authorizer).await?,
            moderator: policy_by_id(self, moderator).await?,
            shadow: policy_by_id(self, shadow).await?,
        })
    }

    async fn record_disagreement(&self, d: &DisagreementRecord) -> Result<(), StoreError> {
        S::query(
            "INSERT INTO shadow_disagreements (shadow_digest, operation, principal_id,
                 active_decision, shadow_decision, occurred_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&d.shadow_digest)
        .bind(&d.operation)
        .bind(&d.principal_id)
        .bind(&d.active_decision)
        .bind(&d.shadow_decision)
        .bind(d.occurred_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn list_disagreements(
        &self,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, DisagreementRecord)>, StoreError> {
        #[allow(clippy::type_complexity, reason = "one row's columns")]
        let rows: Vec<(i64, String, String, String, String, String, DateTime<Utc>)> = S::query(
            "SELECT id, shadow_digest, operation, principal_id, active_decision, shadow_decision,
                    occurred_at
             FROM shadow_disagreements WHERE $1 IS NULL OR id < $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(
                    id,
                    shadow_digest,
                    operation,
                    principal_id,
                    active_decision,
                    shadow_decision,
                    occurred_at,
                )| {
                    (
                        id,
                        DisagreementRecord {
                            shadow_digest,
                            operation,
                            principal_id,
                            active_decision,
                            shadow_decision,
                            occurred_at,
                        },
                    )
                },
            )
            .collect())
    }
}
