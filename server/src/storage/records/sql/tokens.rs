//! Personal access tokens and their grants (shared by both SQL adapters; see the
//! layout in `storage/mod.rs`). The issuance rules are decided by `domain::rules` on what the
//! transaction counted under its locks.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::FromRow;
use uuid::Uuid;

use super::{List, ListParam};
use crate::domain::{NewAuditEvent, Role, rules};
use crate::storage::records::dialect::{Conn, Dialect, Issuance};
use crate::storage::records::rows::with_data;
use crate::storage::{
    ExpiringTokens, InsertTokenError, LastUseWrite, NewToken, NoticeEvents, RevokeGrant,
    RevokeOutcome, RotateToken, StoreError, StoredCredential, TokenFilter, TokenRecord, TokenStore,
    TokenUse, WriteContext,
};

/// A token as [`TOKEN_COLUMNS`] selects it.
#[derive(FromRow)]
struct TokenRow {
    id: Uuid,
    public_id: String,
    user_id: Uuid,
    organisation_id: Uuid,
    name: String,
    scopes: List<String>,
    workspace_ids: List<Uuid>,
    environment_ids: List<Uuid>,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
    issued_by_token_id: Option<Uuid>,
    last_used_at: Option<DateTime<Utc>>,
    last_used_address: Option<String>,
    last_used_agent: Option<String>,
}

/// Every token issued by `$1`, transitively (not `$1` itself).
const DESCENDANTS: &str = "WITH RECURSIVE tree(id) AS (
        SELECT id FROM tokens WHERE issued_by_token_id = $1
        UNION SELECT c.id FROM tokens c JOIN tree ON c.issued_by_token_id = tree.id
    ) SELECT id FROM tree";

impl TryFrom<TokenRow> for TokenRecord {
    type Error = StoreError;
    fn try_from(r: TokenRow) -> Result<Self, StoreError> {
        Ok(TokenRecord {
            id: r.id,
            public_id: r.public_id,
            user_id: r.user_id,
            organisation_id: r.organisation_id,
            name: r.name,
            scopes: r.scopes.into_vec(),
            workspace_ids: r.workspace_ids.into_vec(),
            environment_ids: r.environment_ids.into_vec(),
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
            issued_by_token_id: r.issued_by_token_id,
            last_use: r.last_used_at.map(|at| TokenUse {
                at,
                address: r.last_used_address.unwrap_or_default(),
                user_agent: r.last_used_agent,
            }),
        })
    }
}

/// A token with the keyed hash of a secret, until when that secret is valid when a rotation
/// replaced it, and whether its user is disabled.
#[derive(FromRow)]
struct CredentialRow {
    #[sqlx(flatten)]
    token: TokenRow,
    secret_hash: Vec<u8>,
    valid_until: Option<DateTime<Utc>>,
    user_disabled: bool,
    user_role: String,
}

/// The statement authentication sends: the token's current secret, or one a rotation
/// replaced; either way with its user's disabled state and role, read in the same statement so
/// nothing can serve a stale answer. Named so that the activity floor can be checked against it.
pub(in crate::storage::records) fn credential_sql<S: Dialect>() -> String {
    format!(
        "SELECT {token_columns}, t.secret_hash, NULL AS valid_until,
                u.disabled_at IS NOT NULL AS user_disabled, u.role AS user_role
         FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.public_id = $1
         UNION ALL
         SELECT {token_columns}, p.secret_hash, p.valid_until,
                u.disabled_at IS NOT NULL AS user_disabled, u.role AS user_role
         FROM token_previous_secrets p JOIN tokens t ON t.id = p.token_id
              JOIN users u ON u.id = t.user_id
         WHERE p.public_id = $1",
        token_columns = S::TOKEN_COLUMNS,
    )
}

#[async_trait]
impl<S: Dialect> TokenStore for S {
    async fn insert_token(
        &self,
        write: &WriteContext,
        token: &NewToken,
        events: &[NewAuditEvent],
        max_active: u32,
        now: DateTime<Utc>,
    ) -> Result<(), InsertTokenError> {
        let issuance = Issuance {
            token,
            events,
            max_active,
            now,
        };
        // Postgres gathers concurrent issuances into one transaction (`postgres/tokens.rs`);
        // it answers None for a keyed request and for a batch that has to be retried alone.
        if let Some(batched) = self.batch_insert_token(write, issuance).await {
            return batched;
        }
        insert_token_alone(self, write, issuance).await
    }

    async fn find_credential(
        &self,
        public_id: &str,
    ) -> Result<Option<StoredCredential>, StoreError> {
        let query = S::query(sqlx::AssertSqlSafe(credential_sql::<S>())).bind(public_id);
        // Authentication is the request path's hottest read.
        let row: Option<CredentialRow> = self.read_optional(query).await?;
        row.map(|r| {
            let mut token: TokenRecord = r.token.try_into()?;
            token.public_id = public_id.to_owned();
            let user_role = Role::parse(&r.user_role).map_err(|_| {
                StoreError::Internal(format!(
                    "the user of token {} has an unknown role",
                    token.id
                ))
            })?;
            Ok(StoredCredential {
                token,
                secret_hash: r.secret_hash,
                valid_until: r.valid_until,
                user_disabled: r.user_disabled,
                user_role,
            })
        })
        .transpose()
    }

    async fn rotate_token(
        &self,
        write: &WriteContext,
        rotate: &RotateToken,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        // Locked, so a concurrent rotation or revocation goes first or after, never between.
        let current: Option<(String, Vec<u8>)> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT public_id, secret_hash FROM tokens
             WHERE id = $1 AND revoked_at IS NULL AND expires_at > $2 {for_update}",
            for_update = S::FOR_UPDATE
        )))
        .bind(rotate.token_id)
        .bind(rotate.rotated_at)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((previous_id, previous_hash)) = current else {
            return Ok(false);
        };
        // A rotation within an earlier one's grace ends that grace: at most two secrets live.
        S::query(
            "UPDATE token_previous_secrets SET valid_until = $2
             WHERE token_id = $1 AND valid_until > $2",
        )
        .bind(rotate.token_id)
        .bind(rotate.rotated_at)
        .execute(&mut *tx)
        .await?;
        S::query(
            "INSERT INTO token_previous_secrets
                 (public_id, token_id, secret_hash, replaced_at, valid_until)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&previous_id)
        .bind(rotate.token_id)
        .bind(&previous_hash)
        .bind(rotate.rotated_at)
        .bind(rotate.previous_valid_until)
        .execute(&mut *tx)
        .await?;
        S::query("UPDATE tokens SET public_id = $2, secret_hash = $3 WHERE id = $1")
            .bind(rotate.token_id)
            .bind(&rotate.public_id)
            .bind(&rotate.secret_hash)
            .execute(&mut *tx)
            .await?;
        S::insert_events(&mut tx, &rotate.events).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn revoke_grant(
        &self,
        write: &WriteContext,
        revoke: &RevokeGrant,
    ) -> Result<Option<RevokeOutcome>, StoreError> {
        let root = revoke.token_id;
        // Another organisation's token is the same 404 as an unknown one, found by its primary
        // key alone: no lock on it or its lineage, and no place in a write lane, which would
        // let one organisation stall another's issuances by naming its tokens.
        let ours: Option<(i32,)> =
            S::query("SELECT 1 FROM tokens WHERE id = $1 AND organisation_id = $2")
                .bind(root)
                .bind(revoke.event.organisation_id)
                .fetch_optional(self.pool())
                .await?;
        if ours.is_none() {
            return Ok(None);
        }
        let mut tx = self.begin(write).await?;
        // Lock the token (and with `cascade` its descendants) first: two revocations of its
        // last grants must not both see one left. All in id order, so overlapping cascades
        // cannot deadlock; an issuance by one of them holds its issuer FOR SHARE, so it either
        // finishes first or sees its grants revoked (SQLite: the write lock orders them all).
        // Without `cascade` the plain `= $1` keeps the primary-key lookup.
        let tokens = |column: &str| {
            if revoke.cascade {
                format!("({column} = $1 OR {column} IN ({DESCENDANTS}))")
            } else {
                format!("{column} = $1")
            }
        };
        S::query(sqlx::AssertSqlSafe(format!(
            "SELECT 1 FROM tokens WHERE {} ORDER BY id {for_update}",
            tokens("id"),
            for_update = S::FOR_UPDATE
        )))
        .bind(root)
        .execute(&mut *tx)
        .await?;
        let grants: Vec<(Uuid, Uuid)> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT tw.token_id, tw.workspace_id FROM token_workspaces tw
             WHERE tw.revoked_at IS NULL AND ($2 IS NULL OR tw.workspace_id = $2)
               AND {}
             ORDER BY tw.position",
            tokens("tw.token_id")
        )))
        .bind(root)
        .bind(revoke.workspace_id)
        .fetch_all(&mut *tx)
        .await?;
        if !grants.iter().any(|(token, _)| *token == root) {
            return Ok(None);
        }
        // The root's grants first, then the descendants' grouped by token.
        let mut ordered = grants;
        ordered.sort_by_key(|(token, _)| (*token != root, *token));
        let mut events = Vec::with_capacity(ordered.len());
        let mut outcome = RevokeOutcome {
            token_revoked: false,
            descendants_revoked: 0,
        };
        for (i, (token, workspace)) in ordered.iter().enumerate() {
            S::query(
                "UPDATE token_workspaces SET revoked_at = $3, revoked_reason = $4
                 WHERE token_id = $1 AND workspace_id = $2 AND revoked_at IS NULL",
            )
            .bind(token)
            .bind(workspace)
            .bind(revoke.revoked_at)
            .bind(&revoke.reason)
            .execute(&mut *tx)
            .await?;
            let (left,): (i64,) = S::query(
                "SELECT count(*) FROM token_workspaces WHERE token_id = $1 AND revoked_at IS NULL",
            )
            .bind(token)
            .fetch_one(&mut *tx)
            .await?;
            let token_revoked = left == 0;
            if token_revoked {
                S::query("UPDATE tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL")
                    .bind(token)
                    .bind(revoke.revoked_at)
                    .execute(&mut *tx)
                    .await?;
            }
            // A token's revocation is only known once its last grant in this batch is revoked.
            let last_of_token = ordered.get(i + 1).is_none_or(|(next, _)| next != token);
            let mut event = with_data(&revoke.event, "tokenId", serde_json::json!(token));
            event.workspace_id = Some(*workspace);
            event.target_id = *token;
            let event = with_data(
                &event,
                "tokenRevoked",
                Value::Bool(token_revoked && last_of_token),
            );
            if *token == root {
                outcome.token_revoked = token_revoked;
                events.push(event);
            } else {
                outcome.descendants_revoked += 1;
                events.push(with_data(&event, "cascadedFrom", serde_json::json!(root)));
            }
        }
        S::insert_events(&mut tx, &events).await?;
        self.commit(tx, write).await?;
        Ok(Some(outcome))
    }

    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>, StoreError> {
        let rows: Vec<TokenRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {token_columns} FROM tokens t
             WHERE ($3 IS NULL OR t.id = $3) AND ($1 IS NULL OR t.user_id = $1)
               AND ($2 IS NULL OR EXISTS (SELECT 1 FROM token_workspaces tw
                    WHERE tw.token_id = t.id AND tw.workspace_id = $2 AND tw.revoked_at IS NULL))
               AND ($4 IS NULL OR (t.revoked_at IS NULL AND t.expires_at > $4))
               AND ($5 IS NULL OR t.expires_at <= $5)
               AND ($6 IS NULL OR t.last_used_at < $6
                    OR (t.last_used_at IS NULL AND t.created_at < $6))
               AND ($7 IS NULL OR t.organisation_id = $7)
               AND ($8 IS NULL OR (t.created_at, t.id) >
                    (SELECT a.created_at, a.id FROM tokens a WHERE a.id = $8))
             ORDER BY t.created_at, t.id LIMIT $9",
            token_columns = S::TOKEN_COLUMNS
        )))
        .bind(filter.user_id)
        .bind(filter.workspace_id)
        .bind(filter.token_id)
        .bind(filter.live_at)
        .bind(filter.expires_by)
        .bind(filter.unused_since)
        .bind(filter.organisation_id)
        .bind(filter.after)
        // No limit is the largest one: both engines take a bound `LIMIT`, neither a null one.
        .bind(filter.limit.map_or(i64::MAX, i64::from))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn record_last_uses(
        &self,
        write: &WriteContext,
        uses: &[LastUseWrite],
    ) -> Result<u64, StoreError> {
        if uses.is_empty() {
            return Ok(0);
        }
        // Rows locked in id order, as every other multi-token write takes them: never a
        // deadlock with a cascading revocation or a batch of issuances.
        let mut uses: Vec<&LastUseWrite> = uses.iter().collect();
        uses.sort_by_key(|u| u.token_id);
        let mut tx = self.begin(write).await?;
        let mut changed = 0;
        for u in uses {
            // A use older than the one recorded (a slow replica's) changes nothing.
            changed += S::query(
                "UPDATE tokens SET last_used_at = $2, last_used_address = $3, last_used_agent = $4
                 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)",
            )
            .bind(u.token_id)
            .bind(u.used.at)
            .bind(&u.used.address)
            .bind(u.used.user_agent.as_deref())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        self.commit(tx, write).await?;
        Ok(changed)
    }

    async fn notice_expiring_tokens(
        &self,
        write: &WriteContext,
        due: ExpiringTokens,
        events: &NoticeEvents,
    ) -> Result<usize, StoreError> {
        let mut tx = self.begin(write).await?;
        // The claim: a replica running the same pass waits on these rows (Postgres) or on the
        // write lock (SQLite), then finds `expiry_notice_at` set and takes none of them.
        let claimed: Vec<(Uuid,)> = S::query(
            "UPDATE tokens SET expiry_notice_at = $1
             WHERE id IN (SELECT id FROM tokens
                          WHERE revoked_at IS NULL AND expiry_notice_at IS NULL
                            AND expires_at > $1 AND expires_at <= $2
                          ORDER BY expires_at LIMIT $3)
               AND revoked_at IS NULL AND expiry_notice_at IS NULL
             RETURNING id",
        )
        .bind(due.now)
        .bind(due.until)
        .bind(due.limit)
        .fetch_all(&mut *tx)
        .await?;
        if claimed.is_empty() {
            return Ok(0);
        }
        let ids: Vec<Uuid> = claimed.into_iter().map(|(id,)| id).collect();
        // Read in the claiming transaction, after the claim's locks: a revocation committed
        // before it is seen, one after it waits.
        let rows: Vec<TokenRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {token_columns} FROM tokens t WHERE t.id {ids} ORDER BY t.expires_at, t.id",
            token_columns = S::TOKEN_COLUMNS,
            ids = S::in_uuid_list("$1"),
        )))
        .bind(ListParam(&ids))
        .fetch_all(&mut *tx)
        .await?;
        let mut written = Vec::new();
        for row in rows {
            let token: TokenRecord = row.try_into()?;
            written.extend(events(&token));
        }
        S::insert_events(&mut tx, &written).await?;
        self.commit(tx, write).await?;
        Ok(ids.len())
    }
}

/// One issuance in a transaction of its own: SQLite's only way, and Postgres's for a keyed
/// request (its transaction is held for the outcome) or a batch that failed as a whole.
async fn insert_token_alone<S: Dialect>(
    store: &S,
    write: &WriteContext,
    Issuance {
        token,
        events,
        max_active,
        now,
    }: Issuance<'_>,
) -> Result<(), InsertTokenError> {
    let t = &token.record;
    let mut tx = store.begin(write).await?;
    // Locks first, both in one statement. Postgres: FOR SHARE on the issuer conflicts with
    // revocation's FOR UPDATE, so one waits for the other; the owner's FOR UPDATE serialises
    // issuance per user, so the counts below still hold at the insert. SQLite: the write
    // lock, held since BEGIN, does both. Without an issuer (cpctl) `$1` is NULL.
    S::query(sqlx::AssertSqlSafe(format!(
        "WITH issuer AS (SELECT id FROM tokens WHERE id = $1 AND revoked_at IS NULL {for_share}),
              owner AS (SELECT id FROM users WHERE id = $2 {for_update})
         SELECT (SELECT count(*) FROM issuer), (SELECT count(*) FROM owner)",
        for_update = S::FOR_UPDATE,
        for_share = S::FOR_SHARE
    )))
    .bind(t.issued_by_token_id)
    .bind(t.user_id)
    .execute(&mut *tx)
    .await?;
    // A later statement, so a later snapshot (Postgres, read committed): it sees what a
    // revocation the locks waited for committed.
    let (issuer_grants, same_name, active): (i64, i64, i64) = S::query(sqlx::AssertSqlSafe(
        format!(
            "SELECT (SELECT count(*) FROM token_workspaces tw
                     WHERE tw.token_id = (SELECT id FROM tokens WHERE id = $4 AND revoked_at IS NULL)
                       AND tw.revoked_at IS NULL AND tw.workspace_id {}),
                    count(*) FILTER (WHERE name = $2), count(*)
             FROM tokens WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > $3",
            S::in_uuid_list("$5")
        ),
    ))
    .bind(t.user_id)
    .bind(&t.name)
    .bind(now)
    .bind(t.issued_by_token_id)
    .bind(ListParam(&t.workspace_ids))
    .fetch_one(&mut *tx)
    .await?;
    rules::may_issue(t, issuer_grants, same_name, active, max_active)?;
    insert_token_rows::<S>(&mut tx, token).await?;
    S::insert_events(&mut tx, events).await?;
    store.commit(tx, write).await?;
    Ok(())
}

/// The token and its grants: one statement where the backend can ([`Dialect::INSERT_TOKEN`]),
/// else two.
async fn insert_token_rows<S: Dialect>(
    conn: &mut Conn<S>,
    token: &NewToken,
) -> Result<(), StoreError> {
    let t = &token.record;
    let insert = S::query(S::INSERT_TOKEN)
        .bind(t.id)
        .bind(&t.public_id)
        .bind(t.user_id)
        .bind(t.organisation_id)
        .bind(&t.name)
        .bind(&token.secret_hash)
        .bind(ListParam(&t.scopes))
        .bind(ListParam(&t.environment_ids))
        .bind(t.created_at)
        .bind(t.expires_at)
        .bind(t.issued_by_token_id);
    let grants = ListParam(&t.workspace_ids);
    match S::INSERT_GRANTS {
        None => {
            insert.bind(grants).execute(&mut *conn).await?;
        }
        Some(insert_grants) => {
            insert.execute(&mut *conn).await?;
            let grants = S::query(insert_grants).bind(t.id).bind(grants);
            grants.execute(&mut *conn).await?;
        }
    }
    Ok(())
}
