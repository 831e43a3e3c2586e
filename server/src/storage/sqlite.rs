//! The SQLite adapter of the storage ports, for a single replica with an embedded store.
//!
//! Write transactions begin IMMEDIATE, taking the database's write lock at their start: writers
//! are serialised, so every check-then-write is atomic without row locks. Uuids are stored as
//! BLOBs, times as RFC 3339 TEXT in UTC (text order is time order), arrays as JSON TEXT.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{FromRow, Sqlite, SqliteConnection, Transaction};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::changes::{Change, ChangeFeed, ChangeStream, Topic};
use super::operations::*;
use super::rows::*;
use super::{
    AuditStore, DirectoryStore, DisagreementRecord, Environment, InsertTokenError, NewToken,
    Organisation, PolicyRecord, PolicyState, PolicyStore, RevokeGrant, RevokeOutcome,
    SettingsStore, StoreError, StoredCredential, TargetLookup, TokenFilter, TokenRecord,
    TokenStore, User, Workspace,
};
use crate::domain::{
    AuditEvent, CommandStatus, NewAuditEvent, ReportReason, ReviewStatus, RevisionState,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// How long a statement waits for another writer's lock, and a request for a connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The set of uuids in a JSON array bound as a parameter (see [`to_json`]), for `IN (...)`.
macro_rules! uuids_in {
    ($param:literal) => {
        concat!(
            "(SELECT unhex(replace(value, '-', '')) FROM json_each(",
            $param,
            "))"
        )
    };
}

/// Announcements buffered for a change stream that does not read before it is told to resync.
const ANNOUNCED_CAPACITY: usize = 1024;

#[derive(Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// Told after commit of each workspace that gained audit events; SQLite has no NOTIFY, so
    /// only this process's writes are announced.
    announced: broadcast::Sender<Change>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating when missing) the database file and its parent directory.
    pub async fn open(path: &Path, max_connections: u32) -> Result<Self, StoreError> {
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|e| {
                StoreError::Internal(format!("cannot create {}: {e}", parent.display()))
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(BUSY_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(map_err)?;
        Ok(Self {
            pool,
            announced: broadcast::channel(ANNOUNCED_CAPACITY).0,
        })
    }

    /// Applies pending migrations.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(inner) => map_err(inner),
            other => StoreError::Internal(other.to_string()),
        })
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Begins a write transaction holding the write lock from the start, so what it reads
    /// cannot change before it writes.
    async fn begin(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_err)
    }

    /// Commits, then announces the workspaces whose events it wrote (never before: a rolled-back
    /// event must not be announced).
    async fn commit(
        &self,
        tx: Transaction<'static, Sqlite>,
        workspaces: &[Option<Uuid>],
    ) -> Result<(), StoreError> {
        tx.commit().await.map_err(map_err)?;
        if self.announced.receiver_count() > 0 {
            let mut seen: Vec<Uuid> = Vec::with_capacity(workspaces.len());
            for id in workspaces.iter().flatten() {
                if !seen.contains(id) {
                    seen.push(*id);
                    // No stream left listening is fine.
                    let _ = self.announced.send(Change::AuditAppended {
                        workspace_id: *id,
                        sequence: None,
                    });
                }
            }
        }
        Ok(())
    }
}

/// In process: this process's audit events, at commit. Other processes' (`cpctl`) and every
/// policy change are not announced; consumers poll for them.
#[async_trait]
impl ChangeFeed for SqliteStore {
    async fn changes(&self, topic: Topic) -> ChangeStream {
        if topic != Topic::AuditEvents {
            return ChangeStream::silent();
        }
        let announced = self.announced.subscribe();
        ChangeStream::new(
            futures_util::stream::unfold(announced, |mut announced| async move {
                let change = match announced.recv().await {
                    Ok(change) => change,
                    Err(broadcast::error::RecvError::Lagged(_)) => Change::Resync,
                    Err(broadcast::error::RecvError::Closed) => return None,
                };
                Some((change, announced))
            }),
            false,
        )
    }
}

fn map_err(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            // SQLite names no constraint; its message names the columns instead.
            let rule = db
                .constraint()
                .or_else(|| db.message().strip_prefix("UNIQUE constraint failed: "))
                .unwrap_or("unique");
            StoreError::Conflict(rule.to_owned())
        }
        sqlx::Error::Database(db) => {
            // Primary result codes: 5 BUSY, 6 LOCKED, 10 IOERR, 13 FULL, 14 CANTOPEN.
            let primary = db
                .code()
                .and_then(|code| code.parse::<i32>().ok())
                .map(|code| code & 0xff);
            if matches!(primary, Some(5 | 6 | 10 | 13 | 14)) {
                StoreError::Unavailable(e.to_string())
            } else {
                StoreError::Internal(e.to_string())
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e.to_string()),
        _ => StoreError::Internal(e.to_string()),
    }
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Internal(format!("cannot encode a list as JSON: {e}")))
}

fn from_json<T: serde::de::DeserializeOwned>(raw: &str) -> Result<T, StoreError> {
    serde_json::from_str(raw)
        .map_err(|e| StoreError::Internal(format!("stored list is not valid JSON: {e}")))
}

/// The open command statuses as a JSON array, for `status IN (SELECT value FROM json_each(..))`.
fn open_statuses() -> Result<String, StoreError> {
    let open: Vec<&str> = CommandStatus::OPEN.iter().map(|s| s.as_str()).collect();
    to_json(&open)
}

/// Writes one audit event, giving a workspace event the next sequence of its workspace (the
/// transaction holds the write lock, so sequences are gapless and unique).
async fn insert_event(
    conn: &mut SqliteConnection,
    event: &NewAuditEvent,
) -> Result<(), StoreError> {
    // Organisation-level events have no sequence.
    let seq: Option<i64> = match event.workspace_id {
        Some(workspace_id) => {
            let row: Option<(i64,)> = sqlx::query_as(
                "UPDATE workspaces SET audit_seq = audit_seq + 1 WHERE id = $1 RETURNING audit_seq",
            )
            .bind(workspace_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
            row.map(|(seq,)| seq)
        }
        None => None,
    };
    sqlx::query(
        "INSERT INTO audit_events (id, organisation_id, workspace_id, seq, event_type, actor_kind,
             actor_id, target_kind, target_id, correlation_id, occurred_at, data)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(Uuid::new_v4())
    .bind(event.organisation_id)
    .bind(event.workspace_id)
    .bind(seq)
    .bind(event.event_type)
    .bind(event.actor.kind.as_str())
    .bind(event.actor.id)
    .bind(event.target_kind)
    .bind(event.target_id)
    .bind(&event.correlation_id)
    .bind(event.occurred_at)
    .bind(event.data.to_string())
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(())
}

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
impl SettingsStore for SqliteStore {
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
        let mut tx = self.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(candidate)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected()
            == 1;
        let (value,): (String,) = sqlx::query_as("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
        self.commit(tx, &[]).await?;
        Ok((value, inserted))
    }
}

#[async_trait]
impl DirectoryStore for SqliteStore {
    async fn create_organisation(
        &self,
        org: &Organisation,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO organisations (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(org.id)
            .bind(&org.name)
            .bind(org.created_at)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await
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
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO workspaces (id, organisation_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(ws.id)
        .bind(ws.organisation_id)
        .bind(&ws.name)
        .bind(ws.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await
    }

    async fn list_workspaces(
        &self,
        organisation_id: Option<Uuid>,
    ) -> Result<Vec<Workspace>, StoreError> {
        let rows: Vec<(Uuid, Uuid, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, organisation_id, name, created_at FROM workspaces
             WHERE $1 IS NULL OR organisation_id = $1 ORDER BY created_at, name",
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
        let mut tx = self.begin().await?;
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
        self.commit(tx, &[event.workspace_id]).await
    }

    async fn list_environments(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<Environment>, StoreError> {
        let rows: Vec<(Uuid, Uuid, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, workspace_id, name, created_at FROM environments
             WHERE $1 IS NULL OR workspace_id = $1 ORDER BY created_at, name",
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
        let mut tx = self.begin().await?;
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
        self.commit(tx, &[event.workspace_id]).await
    }

    async fn list_users(&self, organisation_id: Option<Uuid>) -> Result<Vec<User>, StoreError> {
        let rows: Vec<(Uuid, Uuid, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, organisation_id, email, created_at FROM users
             WHERE $1 IS NULL OR organisation_id = $1 ORDER BY created_at, email",
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

    async fn lookup_targets(
        &self,
        organisation_id: Uuid,
        workspace_ids: &[Uuid],
        environment_ids: &[Uuid],
    ) -> Result<TargetLookup, StoreError> {
        // One row per thing found: (0, organisation), (1, workspace, its organisation),
        // (2, environment, its workspace).
        let rows: Vec<(i64, Uuid, Uuid)> = sqlx::query_as(concat!(
            "SELECT 0 AS k, id, id AS parent FROM organisations WHERE id = $1
             UNION ALL
             SELECT 1, id, organisation_id FROM workspaces WHERE id IN ",
            uuids_in!("$2"),
            "
             UNION ALL
             SELECT 2, id, workspace_id FROM environments WHERE id IN ",
            uuids_in!("$3"),
            "
             ORDER BY k, id"
        ))
        .bind(organisation_id)
        .bind(to_json(workspace_ids)?)
        .bind(to_json(environment_ids)?)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
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

#[derive(FromRow)]
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

#[async_trait]
impl AuditStore for SqliteStore {
    async fn list_events(
        &self,
        workspace_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let rows: Vec<EventRow> = sqlx::query_as(
            "SELECT id, organisation_id, workspace_id, seq, event_type, actor_kind, actor_id,
                    target_kind, target_id, correlation_id, occurred_at, data
             FROM audit_events
             WHERE workspace_id = $1 AND ($2 IS NULL OR seq < $2)
             ORDER BY seq DESC LIMIT $3",
        )
        .bind(workspace_id)
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(EventRow::into_event).collect()
    }

    async fn events_after(
        &self,
        workspace_id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let rows: Vec<EventRow> = sqlx::query_as(
            "SELECT id, organisation_id, workspace_id, seq, event_type, actor_kind, actor_id,
                    target_kind, target_id, correlation_id, occurred_at, data
             FROM audit_events
             WHERE workspace_id = $1 AND seq > $2
             ORDER BY seq LIMIT $3",
        )
        .bind(workspace_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(EventRow::into_event).collect()
    }
}

const POLICY_COLUMNS: &str = "id, name, kind, version, digest, length(bytes) AS size, created_at";

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

/// Bumps the generation, which the server polls to pick changes up.
async fn policy_changed(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    sqlx::query("UPDATE policy_state SET generation = generation + 1 WHERE id = 1")
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(())
}

impl SqliteStore {
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
impl PolicyStore for SqliteStore {
    async fn insert_policy(
        &self,
        name: &str,
        kind: &str,
        digest: &str,
        bytes: &[u8],
    ) -> Result<PolicyRecord, StoreError> {
        // The write lock serialises versions of one name.
        let mut tx = self.begin().await?;
        let row: PolicyRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "INSERT INTO policies (id, name, kind, version, digest, bytes, created_at)
             VALUES ($1, $2, $3, (SELECT coalesce(max(version), 0) + 1 FROM policies WHERE name = $2),
                 $4, $5, $6)
             RETURNING {POLICY_COLUMNS}"
        )))
        .bind(Uuid::new_v4())
        .bind(name)
        .bind(kind)
        .bind(digest)
        .bind(bytes)
        .bind(Utc::now())
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        self.commit(tx, &[]).await?;
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
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO policy_activations (kind, policy_id, activated_at) VALUES ($1, $2, $3)",
        )
        .bind(&policy.kind)
        .bind(policy.id)
        .bind(Utc::now())
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        policy_changed(&mut tx).await?;
        self.commit(tx, &[]).await
    }

    async fn rollback_policy(&self, kind: &str) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let updated = sqlx::query(
            "UPDATE policy_activations SET rolled_back = 1
             WHERE id = (SELECT id FROM policy_activations WHERE kind = $1 AND NOT rolled_back
                         ORDER BY id DESC LIMIT 1)",
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
        self.commit(tx, &[]).await?;
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
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM policy_shadows WHERE kind = $1")
            .bind(kind)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        if let Some(policy) = policy {
            sqlx::query(
                "INSERT INTO policy_shadows (kind, policy_id, started_at) VALUES ($1, $2, $3)",
            )
            .bind(kind)
            .bind(policy.id)
            .bind(Utc::now())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        policy_changed(&mut tx).await?;
        self.commit(tx, &[]).await
    }

    async fn policy_state(&self) -> Result<PolicyState, StoreError> {
        let (generation, authorizer, moderator, shadow): (
            i64,
            Option<Uuid>,
            Option<Uuid>,
            Option<Uuid>,
        ) = sqlx::query_as(
            "SELECT (SELECT generation FROM policy_state WHERE id = 1),
                    (SELECT policy_id FROM policy_activations
                     WHERE kind = 'authorizer' AND NOT rolled_back ORDER BY id DESC LIMIT 1),
                    (SELECT policy_id FROM policy_activations
                     WHERE kind = 'moderator' AND NOT rolled_back ORDER BY id DESC LIMIT 1),
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
        .execute(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(())
    }

    async fn list_disagreements(&self, limit: u32) -> Result<Vec<DisagreementRecord>, StoreError> {
        let rows: Vec<(String, String, String, String, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT shadow_digest, operation, principal_id, active_decision, shadow_decision,
                    occurred_at
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
                )| DisagreementRecord {
                    shadow_digest,
                    operation,
                    principal_id,
                    active_decision,
                    shadow_decision,
                    occurred_at,
                },
            )
            .collect())
    }
}

#[derive(FromRow)]
struct ReviewRow {
    id: Uuid,
    plugin_id: Uuid,
    author_id: Uuid,
    organisation_id: Uuid,
    rating: i16,
    title: String,
    body: String,
    status: String,
    reasons: String,
    labels: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<ReviewRow> for Review {
    type Error = StoreError;
    fn try_from(r: ReviewRow) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.id,
            plugin_id: r.plugin_id,
            author_id: r.author_id,
            organisation_id: r.organisation_id,
            rating: u8::try_from(r.rating).unwrap_or(0),
            title: r.title,
            body: r.body,
            status: parse_state(&r.status, ReviewStatus::parse)?,
            reasons: from_json(&r.reasons)?,
            labels: from_json(&r.labels)?,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

const REVIEW_COLUMNS: &str = "id, plugin_id, author_id, organisation_id, rating, title, body,
    status, reasons, labels, created_at, updated_at";

async fn insert_key(conn: &mut SqliteConnection, key: &RunnerKey) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO runner_keys (id, runner_id, public_key, created_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(key.id)
    .bind(key.runner_id)
    .bind(&key.public_key)
    .bind(key.created_at)
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(())
}

#[async_trait]
impl OperationsStore for SqliteStore {
    async fn create_pool(
        &self,
        pool: &RunnerPool,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO runner_pools (id, workspace_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(pool.id)
        .bind(pool.workspace_id)
        .bind(&pool.name)
        .bind(pool.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await
    }

    async fn list_pools(&self, workspace_id: Option<Uuid>) -> Result<Vec<RunnerPool>, StoreError> {
        let rows: Vec<PoolRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {POOL_COLUMNS} FROM runner_pools
             WHERE ($1 IS NULL OR workspace_id = $1) ORDER BY created_at, name"
        )))
        .bind(workspace_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn get_pool(&self, pool_id: Uuid) -> Result<Option<RunnerPool>, StoreError> {
        let row: Option<PoolRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {POOL_COLUMNS} FROM runner_pools WHERE id = $1"
        )))
        .bind(pool_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(Into::into))
    }

    async fn create_runner(
        &self,
        runner: &Runner,
        key: &RunnerKey,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO runners (id, pool_id, name, created_at) VALUES ($1, $2, $3, $4)")
            .bind(runner.id)
            .bind(runner.pool_id)
            .bind(&runner.name)
            .bind(runner.created_at)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        insert_key(&mut tx, key).await?;
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await
    }

    async fn get_runner(&self, runner_id: Uuid) -> Result<Option<Runner>, StoreError> {
        let row: Option<(Uuid, Uuid, String, DateTime<Utc>)> =
            sqlx::query_as("SELECT id, pool_id, name, created_at FROM runners WHERE id = $1")
                .bind(runner_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err)?;
        Ok(row.map(|(id, pool_id, name, created_at)| Runner {
            id,
            pool_id,
            name,
            created_at,
        }))
    }

    async fn add_runner_key(
        &self,
        key: &RunnerKey,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        insert_key(&mut tx, key).await?;
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await
    }

    async fn revoke_runner_key(
        &self,
        runner_id: Uuid,
        key_id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let updated = sqlx::query(
            "UPDATE runner_keys SET revoked_at = $3
             WHERE id = $1 AND runner_id = $2 AND revoked_at IS NULL",
        )
        .bind(key_id)
        .bind(runner_id)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if updated == 0 {
            return Ok(false);
        }
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await?;
        Ok(true)
    }

    async fn find_runner_key(&self, key_id: Uuid) -> Result<Option<RunnerKeyLookup>, StoreError> {
        #[derive(FromRow)]
        struct Row {
            id: Uuid,
            runner_id: Uuid,
            public_key: Vec<u8>,
            created_at: DateTime<Utc>,
            revoked_at: Option<DateTime<Utc>>,
            pool_id: Uuid,
            workspace_id: Uuid,
            organisation_id: Uuid,
        }
        let row: Option<Row> = sqlx::query_as(
            "SELECT k.id, k.runner_id, k.public_key, k.created_at, k.revoked_at, r.pool_id,
                    p.workspace_id, w.organisation_id
             FROM runner_keys k JOIN runners r ON r.id = k.runner_id
             JOIN runner_pools p ON p.id = r.pool_id JOIN workspaces w ON w.id = p.workspace_id
             WHERE k.id = $1",
        )
        .bind(key_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(|r| RunnerKeyLookup {
            key: RunnerKey {
                id: r.id,
                runner_id: r.runner_id,
                public_key: r.public_key,
                created_at: r.created_at,
                revoked_at: r.revoked_at,
            },
            pool_id: r.pool_id,
            workspace_id: r.workspace_id,
            organisation_id: r.organisation_id,
        }))
    }

    async fn delete_pool(&self, delete: &DeletePool) -> Result<DeletePoolOutcome, StoreError> {
        let open = open_statuses()?;
        // The write lock orders this against submissions: none can add an open command between
        // the count (or the cancelling) and the delete.
        let mut tx = self.begin().await?;
        let pool: Option<PoolRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {POOL_COLUMNS} FROM runner_pools
             WHERE id = $1 AND workspace_id = $2 AND deleted_at IS NULL"
        )))
        .bind(delete.pool_id)
        .bind(delete.workspace_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some(pool) = pool else {
            return Ok(DeletePoolOutcome::NotFound);
        };
        let cancelled = if delete.force {
            sqlx::query(
                "UPDATE runner_commands SET status = $3, updated_at = $4
                 WHERE pool_id = $1 AND status IN (SELECT value FROM json_each($2))",
            )
            .bind(pool.id)
            .bind(&open)
            .bind(CommandStatus::Cancelled.as_str())
            .bind(delete.at)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected()
        } else {
            let (busy,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM runner_commands
                 WHERE pool_id = $1 AND status IN (SELECT value FROM json_each($2))",
            )
            .bind(pool.id)
            .bind(&open)
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
            if busy > 0 {
                return Ok(DeletePoolOutcome::Busy { open: busy as u64 });
            }
            0
        };
        sqlx::query("UPDATE runner_pools SET deleted_at = $2, deleted_reason = $3 WHERE id = $1")
            .bind(pool.id)
            .bind(delete.at)
            .bind(&delete.reason)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let event = with_data(&delete.event, "cancelledCommands", Value::from(cancelled));
        insert_event(&mut tx, &event).await?;
        self.commit(tx, &[event.workspace_id]).await?;
        let mut pool = RunnerPool::from(pool);
        pool.deleted_at = Some(delete.at);
        Ok(DeletePoolOutcome::Deleted { pool, cancelled })
    }

    async fn submit_command(
        &self,
        command: &RunnerCommand,
        delivery: &WebhookDelivery,
        event: &NewAuditEvent,
    ) -> Result<SubmitOutcome, StoreError> {
        let args = to_json(&command.args)?;
        let mut tx = self.begin().await?;
        let pool: Option<(Option<DateTime<Utc>>,)> = sqlx::query_as(
            "SELECT deleted_at FROM runner_pools WHERE id = $1 AND workspace_id = $2",
        )
        .bind(command.pool_id)
        .bind(command.workspace_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        match pool {
            None => return Ok(SubmitOutcome::PoolNotFound),
            Some((Some(_),)) => return Ok(SubmitOutcome::PoolDeleted),
            Some((None,)) => {}
        }
        sqlx::query(
            "INSERT INTO runner_commands (id, workspace_id, pool_id, environment_id, command, args,
                 timeout_seconds, status, submitted_by, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)",
        )
        .bind(command.id)
        .bind(command.workspace_id)
        .bind(command.pool_id)
        .bind(command.environment_id)
        .bind(&command.command)
        .bind(&args)
        .bind(command.timeout_seconds)
        .bind(command.status.as_str())
        .bind(command.submitted_by)
        .bind(command.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, command_id, status, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $4)",
        )
        .bind(delivery.id)
        .bind(delivery.command_id)
        .bind(delivery.status.as_str())
        .bind(delivery.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await?;
        Ok(SubmitOutcome::Created)
    }

    async fn get_delivery(&self, delivery_id: Uuid) -> Result<Option<DeliveryContext>, StoreError> {
        #[derive(FromRow)]
        struct Row {
            #[sqlx(flatten)]
            delivery: DeliveryRow,
            command_status: String,
            pool_id: Uuid,
            workspace_id: Uuid,
            organisation_id: Uuid,
        }
        let row: Option<Row> = sqlx::query_as(
            "SELECT d.id, d.command_id, d.status, d.detail, d.exit_code, d.created_at, d.updated_at,
                    c.status AS command_status, c.pool_id, c.workspace_id, w.organisation_id
             FROM webhook_deliveries d JOIN runner_commands c ON c.id = d.command_id
             JOIN workspaces w ON w.id = c.workspace_id
             WHERE d.id = $1",
        )
        .bind(delivery_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(|r| {
            Ok(DeliveryContext {
                delivery: r.delivery.try_into()?,
                command_status: parse_state(&r.command_status, CommandStatus::parse)?,
                pool_id: r.pool_id,
                workspace_id: r.workspace_id,
                organisation_id: r.organisation_id,
            })
        })
        .transpose()
    }

    async fn transition_delivery(
        &self,
        t: &DeliveryTransition,
    ) -> Result<Option<WebhookDelivery>, StoreError> {
        let open = open_statuses()?;
        let mut tx = self.begin().await?;
        let row: Option<DeliveryRow> = sqlx::query_as(
            "UPDATE webhook_deliveries SET status = $3, detail = COALESCE($4, detail),
                 exit_code = COALESCE($5, exit_code), updated_at = $6
             WHERE id = $1 AND status = $2
             RETURNING id, command_id, status, detail, exit_code, created_at, updated_at",
        )
        .bind(t.delivery_id)
        .bind(t.from.as_str())
        .bind(t.to.as_str())
        .bind(&t.detail)
        .bind(t.exit_code)
        .bind(t.at)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some(row) = row else {
            return Ok(None);
        };
        // A cancelled (or otherwise finished) command takes no more reports.
        let moved = sqlx::query(
            "UPDATE runner_commands SET status = $2, updated_at = $3
             WHERE id = $1 AND status IN (SELECT value FROM json_each($4))",
        )
        .bind(row.command_id)
        .bind(t.to.command_status().as_str())
        .bind(t.at)
        .bind(&open)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if moved == 0 {
            return Ok(None);
        }
        insert_event(&mut tx, &t.event).await?;
        self.commit(tx, &[t.event.workspace_id]).await?;
        row.try_into().map(Some)
    }

    async fn create_workflow(
        &self,
        workflow: &Workflow,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO workflows (id, workspace_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(workflow.id)
        .bind(workflow.workspace_id)
        .bind(&workflow.name)
        .bind(workflow.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await
    }

    async fn list_workflows(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<Workflow>, StoreError> {
        let rows: Vec<WorkflowRow> = sqlx::query_as(
            "SELECT id, workspace_id, name, created_at FROM workflows
             WHERE ($1 IS NULL OR workspace_id = $1) ORDER BY created_at, name",
        )
        .bind(workspace_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn get_workflow(&self, workflow_id: Uuid) -> Result<Option<Workflow>, StoreError> {
        let row: Option<WorkflowRow> = sqlx::query_as(
            "SELECT id, workspace_id, name, created_at FROM workflows WHERE id = $1",
        )
        .bind(workflow_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(Into::into))
    }

    async fn create_revision(
        &self,
        workflow: &Workflow,
        id: Uuid,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<WorkflowRevision, StoreError> {
        // The write lock serialises numbering.
        let mut tx = self.begin().await?;
        let (number,): (i32,) = sqlx::query_as(
            "INSERT INTO workflow_revisions (id, workflow_id, number, state, created_at)
             SELECT $1, $2, COALESCE(max(number), 0) + 1, $3, $4
             FROM workflow_revisions WHERE workflow_id = $2
             RETURNING number",
        )
        .bind(id)
        .bind(workflow.id)
        .bind(RevisionState::Draft.as_str())
        .bind(at)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        let event = with_data(event, "number", Value::from(number));
        insert_event(&mut tx, &event).await?;
        self.commit(tx, &[event.workspace_id]).await?;
        Ok(WorkflowRevision {
            id,
            workflow_id: workflow.id,
            workspace_id: workflow.workspace_id,
            number,
            state: RevisionState::Draft,
            requested_by: None,
            requested_at: None,
            comment: None,
            created_at: at,
        })
    }

    async fn get_revision(
        &self,
        revision_id: Uuid,
    ) -> Result<Option<WorkflowRevision>, StoreError> {
        let row: Option<RevisionRow> = sqlx::query_as(
            "SELECT r.id, r.workflow_id, w.workspace_id, r.number, r.state, r.requested_by,
                    r.requested_at, r.request_comment, r.created_at
             FROM workflow_revisions r JOIN workflows w ON w.id = r.workflow_id
             WHERE r.id = $1",
        )
        .bind(revision_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(TryInto::try_into).transpose()
    }

    async fn request_approval(
        &self,
        revision_id: Uuid,
        by: Uuid,
        comment: Option<&str>,
        at: DateTime<Utc>,
        event: &NewAuditEvent,
    ) -> Result<Option<WorkflowRevision>, StoreError> {
        let mut tx = self.begin().await?;
        // SQLite's RETURNING cannot name a joined table; a subquery fetches the workspace.
        let row: Option<RevisionRow> = sqlx::query_as(
            "UPDATE workflow_revisions SET state = $2, requested_by = $3, requested_at = $4,
                 request_comment = $5
             WHERE id = $1 AND state = $6
             RETURNING id, workflow_id,
                 (SELECT w.workspace_id FROM workflows w WHERE w.id = workflow_id) AS workspace_id,
                 number, state, requested_by, requested_at, request_comment, created_at",
        )
        .bind(revision_id)
        .bind(RevisionState::PendingApproval.as_str())
        .bind(by)
        .bind(at)
        .bind(comment)
        .bind(RevisionState::Draft.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some(row) = row else {
            return Ok(None);
        };
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await?;
        row.try_into().map(Some)
    }

    async fn create_plugin(
        &self,
        plugin: &Plugin,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO plugins (id, organisation_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(plugin.id)
        .bind(plugin.organisation_id)
        .bind(&plugin.name)
        .bind(plugin.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await
    }

    async fn list_plugins(&self) -> Result<Vec<Plugin>, StoreError> {
        let rows: Vec<PluginRow> = sqlx::query_as(
            "SELECT id, organisation_id, name, created_at FROM plugins ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn get_plugin(&self, plugin_id: Uuid) -> Result<Option<Plugin>, StoreError> {
        let row: Option<PluginRow> = sqlx::query_as(
            "SELECT id, organisation_id, name, created_at FROM plugins WHERE id = $1",
        )
        .bind(plugin_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(Into::into))
    }

    async fn find_review(&self, review_id: Uuid) -> Result<Option<Review>, StoreError> {
        let row: Option<ReviewRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM plugin_reviews WHERE id = $1"
        )))
        .bind(review_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(TryInto::try_into).transpose()
    }

    async fn find_review_by_author(
        &self,
        plugin_id: Uuid,
        author_id: Uuid,
    ) -> Result<Option<Review>, StoreError> {
        let row: Option<ReviewRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM plugin_reviews WHERE plugin_id = $1 AND author_id = $2"
        )))
        .bind(plugin_id)
        .bind(author_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(TryInto::try_into).transpose()
    }

    async fn list_reviews(&self, plugin_id: Uuid) -> Result<Vec<Review>, StoreError> {
        let rows: Vec<ReviewRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM plugin_reviews WHERE plugin_id = $1
             ORDER BY updated_at DESC"
        )))
        .bind(plugin_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn list_reports(&self, review_id: Uuid) -> Result<Vec<Report>, StoreError> {
        let rows: Vec<(Uuid, Uuid, Uuid, String, Option<String>, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, review_id, reporter_id, reason, comment, created_at
             FROM review_reports WHERE review_id = $1 ORDER BY created_at",
        )
        .bind(review_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter()
            .map(
                |(id, review_id, reporter_id, reason, comment, created_at)| {
                    Ok(Report {
                        id,
                        review_id,
                        reporter_id,
                        reason: parse_state(&reason, ReportReason::parse)?,
                        comment,
                        created_at,
                    })
                },
            )
            .collect()
    }

    async fn upsert_review(
        &self,
        review: &Review,
        event: &NewAuditEvent,
    ) -> Result<Review, StoreError> {
        let reasons = to_json(&review.reasons)?;
        let labels = to_json(&review.labels)?;
        let mut tx = self.begin().await?;
        let row: ReviewRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "INSERT INTO plugin_reviews (id, plugin_id, author_id, organisation_id, rating, title,
                 body, status, reasons, labels, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
             ON CONFLICT (plugin_id, author_id) DO UPDATE SET rating = excluded.rating,
                 title = excluded.title, body = excluded.body, status = excluded.status,
                 reasons = excluded.reasons, labels = excluded.labels,
                 updated_at = excluded.updated_at
             RETURNING {REVIEW_COLUMNS}"
        )))
        .bind(review.id)
        .bind(review.plugin_id)
        .bind(review.author_id)
        .bind(review.organisation_id)
        .bind(i16::from(review.rating))
        .bind(&review.title)
        .bind(&review.body)
        .bind(review.status.as_str())
        .bind(&reasons)
        .bind(&labels)
        .bind(review.updated_at)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        let mut event = event.clone();
        event.target_id = row.id;
        insert_event(&mut tx, &event).await?;
        self.commit(tx, &[event.workspace_id]).await?;
        row.try_into()
    }

    async fn insert_report(
        &self,
        report: &Report,
        moderation: &ReviewModeration,
        event: &NewAuditEvent,
    ) -> Result<Option<Review>, StoreError> {
        let reasons = to_json(&moderation.reasons)?;
        let labels = to_json(&moderation.labels)?;
        let mut tx = self.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO review_reports (id, review_id, reporter_id, reason, comment, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (review_id, reporter_id) DO NOTHING",
        )
        .bind(report.id)
        .bind(report.review_id)
        .bind(report.reporter_id)
        .bind(report.reason.as_str())
        .bind(&report.comment)
        .bind(report.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if inserted == 0 {
            return Ok(None);
        }
        let row: ReviewRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "UPDATE plugin_reviews SET status = $2, reasons = $3, labels = $4
             WHERE id = $1 RETURNING {REVIEW_COLUMNS}"
        )))
        .bind(report.review_id)
        .bind(moderation.status.as_str())
        .bind(&reasons)
        .bind(&labels)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, event).await?;
        self.commit(tx, &[event.workspace_id]).await?;
        row.try_into().map(Some)
    }
}
