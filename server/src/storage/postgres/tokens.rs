//! Personal access tokens and their grants.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::FromRow;
use uuid::Uuid;

use super::audit::insert_events;
use super::{PostgresStore, insert_event, map_err};
use crate::domain::NewAuditEvent;
use crate::storage::{
    InsertTokenError, NewToken, RevokeGrant, RevokeOutcome, StoreError, StoredCredential,
    TokenFilter, TokenRecord, TokenStore,
};

#[derive(FromRow)]
struct TokenRow {
    id: Uuid,
    public_id: String,
    user_id: Uuid,
    organisation_id: Uuid,
    name: String,
    scopes: Vec<String>,
    workspace_ids: Vec<Uuid>,
    environment_ids: Vec<Uuid>,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<TokenRow> for TokenRecord {
    fn from(r: TokenRow) -> Self {
        TokenRecord {
            id: r.id,
            public_id: r.public_id,
            user_id: r.user_id,
            organisation_id: r.organisation_id,
            name: r.name,
            scopes: r.scopes,
            workspace_ids: r.workspace_ids,
            environment_ids: r.environment_ids,
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
        }
    }
}

const TOKEN_COLUMNS: &str = "t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    ARRAY(SELECT tw.workspace_id FROM token_workspaces tw
          WHERE tw.token_id = t.id AND tw.revoked_at IS NULL ORDER BY tw.position) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at";

#[async_trait]
impl TokenStore for PostgresStore {
    async fn insert_token(
        &self,
        token: &NewToken,
        events: &[NewAuditEvent],
        max_active: u32,
        now: DateTime<Utc>,
    ) -> Result<(), InsertTokenError> {
        let t = &token.record;
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        if let Some(issuer) = token.issuer_token_id {
            // FOR SHARE on the issuer conflicts with revocation's FOR UPDATE: one waits for the other.
            let (live,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM token_workspaces tw
                 WHERE tw.token_id = (SELECT id FROM tokens WHERE id = $1 AND revoked_at IS NULL FOR SHARE)
                   AND tw.revoked_at IS NULL AND tw.workspace_id = ANY($2)",
            )
            .bind(issuer)
            .bind(&t.workspace_ids)
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
            if live != t.workspace_ids.len() as i64 {
                return Err(InsertTokenError::IssuerLostAccess);
            }
        }
        // The owner's row lock serialises issuance per user, so the name and count checks hold.
        sqlx::query("SELECT 1 FROM users WHERE id = $1 FOR UPDATE")
            .bind(t.user_id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let (same_name, active): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE name = $2), count(*) FROM tokens
             WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > $3",
        )
        .bind(t.user_id)
        .bind(&t.name)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        if same_name > 0 {
            return Err(InsertTokenError::NameTaken);
        }
        if active >= i64::from(max_active) {
            return Err(InsertTokenError::LimitReached);
        }
        sqlx::query(
            "WITH t AS (
                 INSERT INTO tokens (id, public_id, user_id, organisation_id, name, secret_hash, scopes,
                     environment_ids, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id
             )
             INSERT INTO token_workspaces (token_id, workspace_id, position)
             SELECT t.id, w.workspace_id, w.ord - 1 FROM t, unnest($11::uuid[]) WITH ORDINALITY AS w(workspace_id, ord)",
        )
        .bind(t.id)
        .bind(&t.public_id)
        .bind(t.user_id)
        .bind(t.organisation_id)
        .bind(&t.name)
        .bind(&token.secret_hash)
        .bind(&t.scopes)
        .bind(&t.environment_ids)
        .bind(t.created_at)
        .bind(t.expires_at)
        .bind(&t.workspace_ids)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_events(&mut tx, events).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(())
    }

    async fn find_credential(
        &self,
        public_id: &str,
    ) -> Result<Option<StoredCredential>, StoreError> {
        #[derive(FromRow)]
        struct Row {
            #[sqlx(flatten)]
            token: TokenRow,
            secret_hash: Vec<u8>,
        }
        let mut lease = self.lane.lease().await?;
        let query = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {TOKEN_COLUMNS}, t.secret_hash FROM tokens t WHERE t.public_id = $1"
        )))
        .bind(public_id)
        .fetch_optional(lease.conn()?);
        let outcome = tokio::time::timeout(self.lane.deadline(), query).await;
        let row: Option<Row> = lease.settle(outcome)?;
        Ok(row.map(|r| StoredCredential {
            token: r.token.into(),
            secret_hash: r.secret_hash,
        }))
    }

    async fn revoke_grant(
        &self,
        revoke: &RevokeGrant,
    ) -> Result<Option<RevokeOutcome>, StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        // Lock the token first: two revocations of its last grants must not both see one left.
        sqlx::query("SELECT 1 FROM tokens WHERE id = $1 FOR UPDATE")
            .bind(revoke.token_id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let updated = sqlx::query(
            "UPDATE token_workspaces SET revoked_at = $3, revoked_reason = $4
             WHERE token_id = $1 AND workspace_id = $2 AND revoked_at IS NULL",
        )
        .bind(revoke.token_id)
        .bind(revoke.workspace_id)
        .bind(revoke.revoked_at)
        .bind(&revoke.reason)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if updated == 0 {
            return Ok(None);
        }
        let (left,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM token_workspaces WHERE token_id = $1 AND revoked_at IS NULL",
        )
        .bind(revoke.token_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        let token_revoked = left == 0;
        if token_revoked {
            sqlx::query("UPDATE tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL")
                .bind(revoke.token_id)
                .bind(revoke.revoked_at)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        let mut event = revoke.event.clone();
        if let Value::Object(data) = &mut event.data {
            data.insert("tokenRevoked".into(), Value::Bool(token_revoked));
        }
        insert_event(&mut tx, &event).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(Some(RevokeOutcome { token_revoked }))
    }

    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>, StoreError> {
        let rows: Vec<TokenRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {TOKEN_COLUMNS} FROM tokens t
             WHERE ($1::uuid IS NULL OR t.user_id = $1)
               AND ($2::uuid IS NULL OR EXISTS (SELECT 1 FROM token_workspaces tw
                    WHERE tw.token_id = t.id AND tw.workspace_id = $2 AND tw.revoked_at IS NULL))
             ORDER BY t.created_at, t.name"
        )))
        .bind(filter.user_id)
        .bind(filter.workspace_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(rows.into_iter().map(Into::into).collect())
    }
}
