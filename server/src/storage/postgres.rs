//! The Postgres adapter of the storage ports.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{FromRow, PgConnection, Row as _};
use uuid::Uuid;

use super::pg_lane::ReadLane;
use super::{
    AuditStore, DirectoryStore, DisagreementRecord, Environment, InsertTokenError, NewToken,
    Organisation, PolicyRecord, PolicyState, PolicyStore, RevokeGrant, RevokeOutcome,
    SettingsStore, StoreError, StoredCredential, TargetLookup, TokenFilter, TokenRecord,
    TokenStore, User, Workspace,
};
use crate::domain::{AuditEvent, NewAuditEvent};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// Pool connections held for good by `LISTEN` (the audit feed and the policy watcher).
pub const LISTENING_CONNECTIONS: u32 = 2;

/// Connection settings; defaults suit one replica on a small machine.
#[derive(Debug, Clone)]
pub struct PostgresSettings {
    pub max_connections: u32,
    /// How long a request waits for a connection before it is answered 503.
    pub acquire_timeout: Duration,
    /// Server-side cap on one statement, so a stuck query cannot hang a request.
    pub statement_timeout: Duration,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(3),
            statement_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// Connections for the request path's single-statement reads (see `pg_lane`).
    lane: Arc<ReadLane>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool)
            .finish()
    }
}

impl PostgresStore {
    /// Opens a pool lazily: nothing is dialled until the first query.
    pub fn connect_lazy(url: &str, settings: &PostgresSettings) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Internal(format!("invalid DATABASE_URL: {e}")))?
            .options([(
                "statement_timeout",
                settings.statement_timeout.as_millis().to_string(),
            )]);
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            // sqlx pings a connection before handing it out, within the acquire timeout: the
            // only bound on a statement sent over a silently partitioned network. The request
            // path's reads avoid that round trip through the read lane, which has its own.
            .connect_lazy_with(options);
        // Half of what the listeners leave, so writes always find connections of their own.
        let lane = ReadLane::new(
            pool.clone(),
            (settings
                .max_connections
                .saturating_sub(LISTENING_CONNECTIONS)
                / 2) as usize,
            settings.acquire_timeout,
            settings.statement_timeout + Duration::from_secs(1),
        );
        Ok(Self {
            pool,
            lane: Arc::new(lane),
        })
    }

    /// Creates the database named in `url` when it does not exist yet, so a first run needs no
    /// `createdb`. Returns true when it was created.
    pub async fn ensure_database(url: &str) -> Result<bool, StoreError> {
        use sqlx::migrate::MigrateDatabase;
        if sqlx::Postgres::database_exists(url)
            .await
            .map_err(map_err)?
        {
            return Ok(false);
        }
        match sqlx::Postgres::create_database(url).await {
            Ok(()) => Ok(true),
            // Another replica created it first.
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42P04") => Ok(false),
            Err(e) => Err(map_err(e)),
        }
    }

    /// Applies pending migrations; replicas starting together serialise on an advisory lock.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(inner) => map_err(inner),
            other => StoreError::Internal(other.to_string()),
        })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

pub(super) fn map_err(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict(db.constraint().unwrap_or("unique").to_owned())
        }
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            // 08: connection exceptions, 57P: shutdown, 57014: statement timeout, 53: resources.
            if code.starts_with("08")
                || code.starts_with("57P")
                || code == "57014"
                || code.starts_with("53")
            {
                StoreError::Unavailable(e.to_string())
            } else {
                StoreError::Internal(e.to_string())
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e.to_string()),
        _ => StoreError::Internal(e.to_string()),
    }
}

/// Writes one audit event, taking the next sequence of its workspace under that row's lock, and
/// announces it on [`AUDIT_CHANNEL`] (delivered at commit, so listeners never see a rolled-back
/// event). One round trip.
pub(super) async fn insert_event(
    conn: &mut PgConnection,
    event: &NewAuditEvent,
) -> Result<(), StoreError> {
    sqlx::query(
        "WITH seq AS (
             UPDATE workspaces SET audit_seq = audit_seq + 1 WHERE id = $3 RETURNING audit_seq
         ), ins AS (
             INSERT INTO audit_events (id, organisation_id, workspace_id, seq, event_type,
                 actor_kind, actor_id, target_kind, target_id, correlation_id, occurred_at, data)
             VALUES ($1, $2, $3, (SELECT audit_seq FROM seq), $4, $5, $6, $7, $8, $9, $10, $11)
             RETURNING workspace_id, seq
         )
         SELECT pg_notify('cp_audit', workspace_id::text || ' ' || seq::text)
         FROM ins WHERE seq IS NOT NULL",
    )
    .bind(Uuid::new_v4())
    .bind(event.organisation_id)
    .bind(event.workspace_id)
    .bind(event.event_type)
    .bind(event.actor.kind.as_str())
    .bind(event.actor.id)
    .bind(event.target_kind)
    .bind(event.target_id)
    .bind(&event.correlation_id)
    .bind(event.occurred_at)
    .bind(&event.data)
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(())
}

/// Writes events in workspace order so concurrent writers lock workspace rows in one order.
async fn insert_events(
    conn: &mut PgConnection,
    events: &[NewAuditEvent],
) -> Result<(), StoreError> {
    let mut ordered: Vec<&NewAuditEvent> = events.iter().collect();
    ordered.sort_by_key(|e| e.workspace_id);
    for event in ordered {
        insert_event(conn, event).await?;
    }
    Ok(())
}

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
impl SettingsStore for PostgresStore {
    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn setting_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        let row: Option<(String,)> = sqlx::query_as("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(row.map(|(v,)| v))
    }

    async fn setting_get_or_insert(
        &self,
        key: &str,
        candidate: &str,
    ) -> Result<(String, bool), StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(candidate)
        .execute(&self.pool)
        .await
        .map_err(map_err)?
        .rows_affected()
            == 1;
        let (value,): (String,) = sqlx::query_as("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok((value, inserted))
    }
}

#[async_trait]
impl DirectoryStore for PostgresStore {
    async fn create_organisation(
        &self,
        org: &Organisation,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query("INSERT INTO organisations (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(org.id)
            .bind(&org.name)
            .bind(org.created_at)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn list_organisations(&self) -> Result<Vec<Organisation>, StoreError> {
        let rows: Vec<(Uuid, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, name, created_at FROM organisations ORDER BY created_at, name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(rows
            .into_iter()
            .map(|(id, name, created_at)| Organisation {
                id,
                name,
                created_at,
            })
            .collect())
    }

    async fn create_workspace(
        &self,
        ws: &Workspace,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query("INSERT INTO workspaces (id, organisation_id, name, created_at) VALUES ($1, $2, $3, $4)")
            .bind(ws.id)
            .bind(ws.organisation_id)
            .bind(&ws.name)
            .bind(ws.created_at)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn list_workspaces(
        &self,
        organisation_id: Option<Uuid>,
    ) -> Result<Vec<Workspace>, StoreError> {
        let rows: Vec<(Uuid, Uuid, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, organisation_id, name, created_at FROM workspaces
             WHERE $1::uuid IS NULL OR organisation_id = $1 ORDER BY created_at, name",
        )
        .bind(organisation_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(rows
            .into_iter()
            .map(|(id, organisation_id, name, created_at)| Workspace {
                id,
                organisation_id,
                name,
                created_at,
            })
            .collect())
    }

    async fn create_environment(
        &self,
        env: &Environment,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query(
            "INSERT INTO environments (id, workspace_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(env.id)
        .bind(env.workspace_id)
        .bind(&env.name)
        .bind(env.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn list_environments(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<Environment>, StoreError> {
        let rows: Vec<(Uuid, Uuid, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, workspace_id, name, created_at FROM environments
             WHERE $1::uuid IS NULL OR workspace_id = $1 ORDER BY created_at, name",
        )
        .bind(workspace_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
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

    async fn create_user(&self, user: &User, event: &NewAuditEvent) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query(
            "INSERT INTO users (id, organisation_id, email, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(user.id)
        .bind(user.organisation_id)
        .bind(&user.email)
        .bind(user.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn list_users(&self, organisation_id: Option<Uuid>) -> Result<Vec<User>, StoreError> {
        let rows: Vec<(Uuid, Uuid, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, organisation_id, email, created_at FROM users
             WHERE $1::uuid IS NULL OR organisation_id = $1 ORDER BY created_at, email",
        )
        .bind(organisation_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(rows
            .into_iter()
            .map(|(id, organisation_id, email, created_at)| User {
                id,
                organisation_id,
                email,
                created_at,
            })
            .collect())
    }

    async fn get_workspace(&self, id: Uuid) -> Result<Option<Workspace>, StoreError> {
        let row: Option<(Uuid, Uuid, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, organisation_id, name, created_at FROM workspaces WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(
            row.map(|(id, organisation_id, name, created_at)| Workspace {
                id,
                organisation_id,
                name,
                created_at,
            }),
        )
    }

    async fn get_user(&self, id: Uuid) -> Result<Option<User>, StoreError> {
        let row: Option<(Uuid, Uuid, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, organisation_id, email, created_at FROM users WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(|(id, organisation_id, email, created_at)| User {
            id,
            organisation_id,
            email,
            created_at,
        }))
    }

    async fn lookup_targets(
        &self,
        organisation_id: Uuid,
        workspace_ids: &[Uuid],
        environment_ids: &[Uuid],
    ) -> Result<TargetLookup, StoreError> {
        let (organisation_exists, ws_ids, ws_orgs, env_ids, env_ws): (bool, Vec<Uuid>, Vec<Uuid>, Vec<Uuid>, Vec<Uuid>) =
            sqlx::query_as(
                "SELECT EXISTS (SELECT 1 FROM organisations WHERE id = $1),
                        ARRAY(SELECT id FROM workspaces WHERE id = ANY($2) ORDER BY id),
                        ARRAY(SELECT organisation_id FROM workspaces WHERE id = ANY($2) ORDER BY id),
                        ARRAY(SELECT id FROM environments WHERE id = ANY($3) ORDER BY id),
                        ARRAY(SELECT workspace_id FROM environments WHERE id = ANY($3) ORDER BY id)",
            )
            .bind(organisation_id)
            .bind(workspace_ids)
            .bind(environment_ids)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(TargetLookup {
            organisation_exists,
            workspaces: ws_ids.into_iter().zip(ws_orgs).collect(),
            environments: env_ids.into_iter().zip(env_ws).collect(),
        })
    }
}

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

#[async_trait]
impl AuditStore for PostgresStore {
    async fn events_after(
        &self,
        workspace_id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM audit_events
             WHERE workspace_id = $1 AND seq > $2
             ORDER BY seq LIMIT $3"
        )))
        .bind(workspace_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(EventRow::into_event).collect()
    }

    async fn list_events(
        &self,
        workspace_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let mut lease = self.lane.lease().await?;
        let query = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM audit_events
             WHERE workspace_id = $1 AND ($2::bigint IS NULL OR seq < $2)
             ORDER BY seq DESC LIMIT $3"
        )))
        .bind(workspace_id)
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(lease.conn()?);
        let outcome = tokio::time::timeout(self.lane.deadline(), query).await;
        let rows: Vec<EventRow> = lease.settle(outcome)?;
        rows.into_iter().map(EventRow::into_event).collect()
    }
}

/// The columns [`EventRow`] decodes, in its order. jsonb as text: readers pass event data
/// through, so nothing parses it into a tree.
const EVENT_COLUMNS: &str = "id, organisation_id, workspace_id, seq, event_type, actor_kind,
    actor_id, target_kind, target_id, correlation_id, occurred_at, data::text AS data";

struct EventRow {
    id: Uuid,
    organisation_id: Uuid,
    workspace_id: Option<Uuid>,
    seq: Option<i64>,
    event_type: String,
    actor_kind: String,
    actor_id: Option<Uuid>,
    target_kind: String,
    target_id: Uuid,
    correlation_id: String,
    occurred_at: DateTime<Utc>,
    data: String,
}

impl<'r> FromRow<'r, PgRow> for EventRow {
    /// By position, in [`EVENT_COLUMNS`] order: a page is 51 rows, and looking each column up
    /// by name showed in profiles.
    fn from_row(row: &'r PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get(0)?,
            organisation_id: row.try_get(1)?,
            workspace_id: row.try_get(2)?,
            seq: row.try_get(3)?,
            event_type: row.try_get(4)?,
            actor_kind: row.try_get(5)?,
            actor_id: row.try_get(6)?,
            target_kind: row.try_get(7)?,
            target_id: row.try_get(8)?,
            correlation_id: row.try_get(9)?,
            occurred_at: row.try_get(10)?,
            data: row.try_get(11)?,
        })
    }
}

impl EventRow {
    fn into_event(self) -> Result<AuditEvent, StoreError> {
        let data = serde_json::value::RawValue::from_string(self.data)
            .map_err(|e| StoreError::Internal(format!("stored event data is not JSON: {e}")))?;
        Ok(AuditEvent {
            id: self.id,
            organisation_id: self.organisation_id,
            workspace_id: self.workspace_id,
            sequence: self.seq,
            event_type: self.event_type,
            actor_kind: self.actor_kind,
            actor_id: self.actor_id,
            target_kind: self.target_kind,
            target_id: self.target_id,
            correlation_id: self.correlation_id,
            occurred_at: self.occurred_at,
            data,
        })
    }
}

/// Channel on which new audit events are announced, as `<workspace id> <sequence>`.
pub const AUDIT_CHANNEL: &str = "cp_audit";

/// Channel on which policy changes are announced.
pub const POLICY_CHANNEL: &str = "cp_policy";

const POLICY_COLUMNS: &str =
    "id, name, kind, version, digest, octet_length(bytes)::bigint AS size, created_at";

#[derive(FromRow)]
struct PolicyRow {
    id: Uuid,
    name: String,
    kind: String,
    version: i32,
    digest: String,
    size: i64,
    created_at: DateTime<Utc>,
}

impl From<PolicyRow> for PolicyRecord {
    fn from(r: PolicyRow) -> Self {
        PolicyRecord {
            id: r.id,
            name: r.name,
            kind: r.kind,
            version: r.version,
            digest: r.digest,
            size: r.size,
            created_at: r.created_at,
        }
    }
}

/// Bumps the generation and notifies replicas; both take effect at commit.
async fn policy_changed(conn: &mut PgConnection) -> Result<(), StoreError> {
    sqlx::query("UPDATE policy_state SET generation = generation + 1 WHERE id = 1")
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(POLICY_CHANNEL)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(())
}

impl PostgresStore {
    async fn policy_by_id(&self, id: Option<Uuid>) -> Result<Option<PolicyRecord>, StoreError> {
        let Some(id) = id else { return Ok(None) };
        let row: Option<PolicyRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {POLICY_COLUMNS} FROM policies WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(Into::into))
    }
}

#[async_trait]
impl PolicyStore for PostgresStore {
    async fn insert_policy(
        &self,
        name: &str,
        kind: &str,
        digest: &str,
        bytes: &[u8],
    ) -> Result<PolicyRecord, StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        // Serialise versions of one name.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let row: PolicyRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "INSERT INTO policies (id, name, kind, version, digest, bytes, created_at)
             VALUES ($1, $2, $3, (SELECT coalesce(max(version), 0) + 1 FROM policies WHERE name = $2), $4, $5, now())
             RETURNING {POLICY_COLUMNS}"
        )))
        .bind(Uuid::new_v4())
        .bind(name)
        .bind(kind)
        .bind(digest)
        .bind(bytes)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(row.into())
    }

    async fn list_policies(&self) -> Result<Vec<PolicyRecord>, StoreError> {
        let rows: Vec<PolicyRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {POLICY_COLUMNS} FROM policies ORDER BY name, version"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn find_policy(
        &self,
        name: &str,
        version: i32,
    ) -> Result<Option<PolicyRecord>, StoreError> {
        let row: Option<PolicyRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {POLICY_COLUMNS} FROM policies WHERE name = $1 AND version = $2"
        )))
        .bind(name)
        .bind(version)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(Into::into))
    }

    async fn policy_bytes(&self, id: Uuid) -> Result<Option<Vec<u8>>, StoreError> {
        let row: Option<(Vec<u8>,)> = sqlx::query_as("SELECT bytes FROM policies WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(row.map(|(b,)| b))
    }

    async fn activate_policy(&self, policy: &PolicyRecord) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query(
            "INSERT INTO policy_activations (kind, policy_id, activated_at) VALUES ($1, $2, now())",
        )
        .bind(&policy.kind)
        .bind(policy.id)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        policy_changed(&mut tx).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn rollback_policy(&self, kind: &str) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        let updated = sqlx::query(
            "UPDATE policy_activations SET rolled_back = true
             WHERE id = (SELECT id FROM policy_activations WHERE kind = $1 AND NOT rolled_back ORDER BY id DESC LIMIT 1)",
        )
        .bind(kind)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if updated == 0 {
            return Ok(false);
        }
        policy_changed(&mut tx).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(true)
    }

    async fn remove_policy(&self, id: Uuid) -> Result<bool, StoreError> {
        let removed = sqlx::query(
            "DELETE FROM policies WHERE id = $1
               AND NOT EXISTS (SELECT 1 FROM policy_activations WHERE policy_id = $1)
               AND NOT EXISTS (SELECT 1 FROM policy_shadows WHERE policy_id = $1)",
        )
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(map_err)?
        .rows_affected();
        Ok(removed == 1)
    }

    async fn set_shadow(
        &self,
        kind: &str,
        policy: Option<&PolicyRecord>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query("DELETE FROM policy_shadows WHERE kind = $1")
            .bind(kind)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        if let Some(policy) = policy {
            sqlx::query(
                "INSERT INTO policy_shadows (kind, policy_id, started_at) VALUES ($1, $2, now())",
            )
            .bind(kind)
            .bind(policy.id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        policy_changed(&mut tx).await?;
        tx.commit().await.map_err(map_err)
    }

    async fn policy_state(&self) -> Result<PolicyState, StoreError> {
        let (generation, authorizer, moderator, shadow): (i64, Option<Uuid>, Option<Uuid>, Option<Uuid>) =
            sqlx::query_as(
                "SELECT (SELECT generation FROM policy_state WHERE id = 1),
                        (SELECT policy_id FROM policy_activations WHERE kind = 'authorizer' AND NOT rolled_back ORDER BY id DESC LIMIT 1),
                        (SELECT policy_id FROM policy_activations WHERE kind = 'moderator' AND NOT rolled_back ORDER BY id DESC LIMIT 1),
                        (SELECT policy_id FROM policy_shadows WHERE kind = 'authorizer')",
            )
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(PolicyState {
            generation,
            authorizer: self.policy_by_id(authorizer).await?,
            moderator: self.policy_by_id(moderator).await?,
            shadow: self.policy_by_id(shadow).await?,
        })
    }

    async fn record_disagreement(&self, d: &DisagreementRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO shadow_disagreements (shadow_digest, operation, principal_id, active_decision, shadow_decision, occurred_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&d.shadow_digest)
        .bind(&d.operation)
        .bind(&d.principal_id)
        .bind(&d.active_decision)
        .bind(&d.shadow_decision)
        .bind(d.occurred_at)
        .execute(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(())
    }

    async fn list_disagreements(&self, limit: u32) -> Result<Vec<DisagreementRecord>, StoreError> {
        let rows: Vec<(String, String, String, String, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT shadow_digest, operation, principal_id, active_decision, shadow_decision, occurred_at
             FROM shadow_disagreements ORDER BY id DESC LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(rows
            .into_iter()
            .map(
                |(
                    shadow_digest,
                    operation,
                    principal_id,
                    active_decision,
                    shadow_decision,
                    occurred_at,
                )| {
                    DisagreementRecord {
                        shadow_digest,
                        operation,
                        principal_id,
                        active_decision,
                        shadow_decision,
                        occurred_at,
                    }
                },
            )
            .collect())
    }
}
