//! The Postgres adapter of the storage ports: one module per port, as in `sqlite/`.
//!
//! Most statements are shared with SQLite (`storage/records/sql/`); each port file here holds only what
//! Postgres does its own way. This module opens, migrates, maps errors and provides the
//! primitives the shared code needs; `audit` writes events, which the numbering pass
//! (`throughput/event_numbering.rs`) numbers and announces on [`AUDIT_CHANNEL`] (NOTIFY),
//! `policies` announces policy changes on [`POLICY_CHANNEL`], and `throughput/read_pool.rs`
//! keeps the request path's read connections (credential lookup, activity pages).

#[cfg(test)]
mod activity_floor;
mod audit;
mod changes;
pub(super) mod copy;
mod dialect;
mod policies;
mod replica;
mod runners;
mod throughput;
mod tokens;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use uuid::Uuid;

use self::throughput::{Batcher, ReadPool, Sequencer};
use crate::storage::StoreError;

pub use self::audit::AUDIT_CHANNEL;
pub use self::policies::POLICY_CHANNEL;
pub use self::replica::open_replica;
pub use self::throughput::{NUMBERING_PARTITIONS, numbering_partition};

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

/// When a transaction is taken for abandoned: its few statements are each cancelled by
/// Postgres at the statement timeout, and nothing else runs inside it, so one still open after
/// three of them waits on a connection that stopped answering, not on work. The server then
/// ends it (`idle_in_transaction_session_timeout`), releasing its row locks; a batch of
/// writes (`throughput/write_batcher.rs`) is dropped by its lane, and a numbering pass
/// (`throughput/event_numbering.rs`) gives up its partition's turn.
fn abandoned_after(settings: &PostgresSettings) -> Duration {
    settings.statement_timeout * 3
}

/// Before a released connection goes back to the pool: one with work still queued (a
/// transaction dropped mid-way, by a stopped handler or a batch past its deadline, queues its
/// ROLLBACK) must answer within `within` (its statement ends by the statement timeout), or it
/// is closed. sqlx's own release ping has no deadline, so on a connection whose path died it
/// held the pool slot for good, and a partition drill lost the whole pool that way. A clean
/// connection costs nothing here (sqlx pings it as before).
async fn settle_released(
    conn: &mut sqlx::PgConnection,
    within: Duration,
) -> Result<bool, sqlx::Error> {
    use sqlx::Connection as _;
    if !conn.should_flush() {
        return Ok(true);
    }
    match tokio::time::timeout(within, conn.ping()).await {
        Ok(settled) => settled.map(|()| true),
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "a released connection did not settle within the statement deadline",
        ))),
    }
}

#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// Connections for the request path's single-statement reads
    /// (`throughput/read_pool.rs`).
    reads: Arc<ReadPool>,
    /// Numbers audit events after their writer's commit (see `throughput/event_numbering.rs`).
    sequencer: Arc<Sequencer>,
    /// Gather concurrent writes of a kind into shared transactions
    /// (`throughput/write_batcher.rs`).
    issuances: Arc<Batcher<tokens::Issuances>>,
    reports: Arc<Batcher<runners::Reports>>,
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
        let abandoned = abandoned_after(settings);
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Internal(format!("invalid DATABASE_URL: {e}")))?
            .options([
                (
                    "statement_timeout",
                    settings.statement_timeout.as_millis().to_string(),
                ),
                (
                    "idle_in_transaction_session_timeout",
                    abandoned.as_millis().to_string(),
                ),
            ]);
        // A statement's own deadline on the client side: Postgres cancels it at the statement
        // timeout, so one not answered a second later is on a connection that stopped answering.
        let statement_deadline = settings.statement_timeout + Duration::from_secs(1);
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            // sqlx pings a connection before handing it out, within the acquire timeout: the
            // only bound on a statement sent over a silently partitioned network. The request
            // path's reads avoid that round trip through the read pool, which has its own.
            .after_release(move |conn, _| Box::pin(settle_released(conn, statement_deadline)))
            .connect_lazy_with(options);
        // Half of what the listeners leave, so writes always find connections of their own.
        let reads = ReadPool::new(
            pool.clone(),
            (settings
                .max_connections
                .saturating_sub(LISTENING_CONNECTIONS)
                / 2) as usize,
            settings.acquire_timeout,
            statement_deadline,
        );
        Ok(Self {
            pool,
            reads: Arc::new(reads),
            sequencer: Arc::new(Sequencer::new(abandoned)),
            issuances: Arc::new(Batcher::new(abandoned)),
            reports: Arc::new(Batcher::new(abandoned)),
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
    /// They run on a connection of their own, without the request path's timeouts: a
    /// migration's statement over a big table, or on a loaded machine, outlives
    /// the 5 s statement timeout (CI saw one of migration 3 cancelled while 240 test databases
    /// were created at once), and a replica waits on another's migration lock for as long as
    /// that one runs. The connection is closed afterwards, so no pooled connection keeps the
    /// lifted limits.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        use sqlx::Connection as _;
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        for lift in [
            "SET statement_timeout = 0",
            "SET idle_in_transaction_session_timeout = 0",
        ] {
            sqlx::query(lift)
                .execute(&mut *conn)
                .await
                .map_err(map_err)?;
        }
        let run = MIGRATOR.run(&mut *conn).await;
        let _ = conn.detach().close().await;
        run.map_err(super::dialect::migration_failed::<Self>)
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

pub(crate) fn map_err(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict(db.constraint().unwrap_or("unique").to_owned())
        }
        sqlx::Error::Database(db) if transient(&db.code().unwrap_or_default()) => {
            StoreError::Unavailable(e.to_string())
        }
        sqlx::Error::Database(_) => StoreError::Internal(e.to_string()),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e.to_string()),
        _ => StoreError::Internal(e.to_string()),
    }
}

/// Whether a SQLSTATE says the database could not do the work now, not that the request or
/// the code is wrong: the caller gets a 503 with `retry-after`, and a retry is safe because
/// Postgres rolled the failed transaction back.
/// - 08, 57P, 53, 58: the connection, a shutdown, exhausted resources, a system or I/O error;
/// - 57014, 55P03: a statement or lock timeout;
/// - 25006: a read-only transaction, as on a primary demoted by a failover;
/// - 28, 3D000: a new connection refused (credentials or database changed under the pool);
/// - 40001, 40P01: a serialization failure or a deadlock, which Postgres resolves by failing
///   one side.
fn transient(code: &str) -> bool {
    const CLASSES: [&str; 5] = ["08", "57P", "53", "58", "28"];
    const CODES: [&str; 6] = ["57014", "55P03", "25006", "3D000", "40001", "40P01"];
    CLASSES.iter().any(|class| code.starts_with(class)) || CODES.contains(&code)
}

/// A Postgres write transaction (see `records/write_tx.rs`).
pub(crate) type WriteTx = super::write_tx::WriteTx<Postgres>;

/// After a commit that wrote events into `workspaces` (none: nothing to wait for): waits for
/// their numbering. A failure here is not the write's (it committed; answering an error would
/// invite a retry that runs it twice): it is logged, and the audit feed's sweep numbers the
/// events.
async fn settle_after_commit(sequencer: &Sequencer, pool: &PgPool, workspaces: &[Uuid]) {
    if let Err(e) = sequencer.settle(pool, workspaces).await {
        tracing::warn!(error = %e, "could not number audit events after a commit; retrying in the background");
    }
}

#[cfg(test)]
mod tests {
    use super::transient;

    #[test]
    fn sqlstates_that_a_retry_can_get_past_are_transient() {
        for code in [
            "08006", "57P01", "57P03", "53300", "58030", "57014", "55P03", "25006", "28P01",
            "3D000", "40001", "40P01",
        ] {
            assert!(transient(code), "{code}");
        }
        // The request or the code is wrong: a retry fails the same way.
        for code in ["23503", "22P02", "42703", "42P01", "XX000", "P0001", ""] {
            assert!(!transient(code), "{code}");
        }
    }
}
