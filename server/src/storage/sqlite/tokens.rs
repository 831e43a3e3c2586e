//! Personal access tokens and their grants.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::FromRow;
use uuid::Uuid;

use super::{SqliteStore, from_json, insert_event, map_err, to_json};
use crate::domain::NewAuditEvent;
use crate::storage::rows::*;
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
    scopes: String,
    workspace_ids: String,
    environment_ids: String,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
}

impl TryFrom<TokenRow> for TokenRecord {
    type Error = StoreError;
    fn try_from(r: TokenRow) -> Result<Self, StoreError> {
        Ok(TokenRecord {
            id: r.id,
            public_id: r.public_id,
            user_id: r.user_id,
            organisation_id: r.organisation_id,
            name: r.name,
            scopes: from_json(&r.scopes)?,
            workspace_ids: from_json(&r.workspace_ids)?,
            environment_ids: from_json(&r.environment_ids)?,
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
        })
    }
}

/// Active grants in grant order, as a JSON array of hex uuids (JSON cannot hold BLOBs).
const TOKEN_COLUMNS: &str = "t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    (SELECT json_group_array(lower(hex(tw.workspace_id)) ORDER BY tw.position)
     FROM token_workspaces tw
     WHERE tw.token_id = t.id AND tw.revoked_at IS NULL) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at";

#[async_trait]
impl TokenStore for SqliteStore {
    async fn insert_token(
        &self,
        token: &NewToken,
        events: &[NewAuditEvent],
        max_active: u32,
        now: DateTime<Utc>,
    ) -> Result<(), InsertTokenError> {
        let t = &token.record;
        let workspace_ids = to_json(&t.workspace_ids)?;
        // The write lock, held from here to commit, orders this against revocations and other
        // issuances, so the checks below still hold when the token is written.
        let mut tx = self.begin().await?;
        if let Some(issuer) = token.issuer_token_id {
            let (live,): (i64,) = sqlx::query_as(concat!(
                "SELECT count(*) FROM token_workspaces tw
                 WHERE tw.token_id = (SELECT id FROM tokens WHERE id = $1 AND revoked_at IS NULL)
                   AND tw.revoked_at IS NULL AND tw.workspace_id IN ",
                uuids_in!("$2")
            ))
            .bind(issuer)
            .bind(&workspace_ids)
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
            if live != t.workspace_ids.len() as i64 {
                return Err(InsertTokenError::IssuerLostAccess);
            }
        }
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
            "INSERT INTO tokens (id, public_id, user_id, organisation_id, name, secret_hash, scopes,
                 environment_ids, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(t.id)
        .bind(&t.public_id)
        .bind(t.user_id)
        .bind(t.organisation_id)
        .bind(&t.name)
        .bind(&token.secret_hash)
        .bind(to_json(&t.scopes)?)
        .bind(to_json(&t.environment_ids)?)
        .bind(t.created_at)
        .bind(t.expires_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        // json_each's key is the array index: the grant's position.
        sqlx::query(
            "INSERT INTO token_workspaces (token_id, workspace_id, position)
             SELECT $1, unhex(replace(value, '-', '')), key FROM json_each($2)",
        )
        .bind(t.id)
        .bind(&workspace_ids)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        for event in events {
            insert_event(&mut tx, event).await?;
        }
        let workspaces: Vec<Option<Uuid>> = events.iter().map(|e| e.workspace_id).collect();
        self.commit(tx, &workspaces).await?;
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
        let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {TOKEN_COLUMNS}, t.secret_hash FROM tokens t WHERE t.public_id = $1"
        )))
        .bind(public_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(|r| {
            Ok(StoredCredential {
                token: r.token.try_into()?,
                secret_hash: r.secret_hash,
            })
        })
        .transpose()
    }

    async fn revoke_grant(
        &self,
        revoke: &RevokeGrant,
    ) -> Result<Option<RevokeOutcome>, StoreError> {
        // The write lock keeps two revocations of a token's last grants from both seeing one left.
        let mut tx = self.begin().await?;
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
        let event = with_data(&revoke.event, "tokenRevoked", Value::Bool(token_revoked));
        insert_event(&mut tx, &event).await?;
        self.commit(tx, &[event.workspace_id]).await?;
        Ok(Some(RevokeOutcome { token_revoked }))
    }

    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>, StoreError> {
        let rows: Vec<TokenRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {TOKEN_COLUMNS} FROM tokens t
             WHERE ($1 IS NULL OR t.user_id = $1)
               AND ($2 IS NULL OR EXISTS (SELECT 1 FROM token_workspaces tw
                    WHERE tw.token_id = t.id AND tw.workspace_id = $2 AND tw.revoked_at IS NULL))
             ORDER BY t.created_at, t.name"
        )))
        .bind(filter.user_id)
        .bind(filter.workspace_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(TryInto::try_into).collect()
    }
}
