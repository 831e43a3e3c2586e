//! Opening the records store a configuration names: the one place that knows which adapters
//! exist. Start-up and `cpctl` ask for a location and get the ports back, never a backend type.

use std::path::PathBuf;

use std::sync::Arc;
use std::time::Duration;

use super::postgres::PostgresSettings;
use super::{
    PostgresStore, ReplicaReads, SharedRecordStore, SqliteFastState, SqliteStore, StoreError,
};

/// Which records store a configuration names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordsLocation {
    /// A Postgres URL.
    Postgres(String),
    /// A SQLite file (the embedded default).
    Sqlite(PathBuf),
}

/// How to open the store, whichever it is.
#[derive(Debug, Clone)]
pub struct OpenSettings {
    /// Connections in all (on Postgres, including those held by LISTEN).
    pub max_connections: u32,
    /// A streaming replica of a Postgres store, for activity pages and stream replays.
    pub read_replica: Option<ReadReplica>,
}

/// `CP_READ_DATABASE_URL` and how far behind it may serve.
#[derive(Debug, Clone)]
pub struct ReadReplica {
    pub url: String,
    pub max_lag: Duration,
}

/// Why the store could not be opened; each says what to check.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("could not reach Postgres (is it running and DATABASE_URL right?)")]
    PostgresUnreachable(#[source] StoreError),
    #[error(transparent)]
    PostgresUrl(StoreError),
    #[error(
        "could not apply migrations to the records store (is Postgres running and DATABASE_URL right?)"
    )]
    PostgresMigrations(#[source] StoreError),
    #[error("CP_READ_DATABASE_URL names a replica of a Postgres records store; these are SQLite")]
    ReplicaWithoutPostgres,
    #[error(transparent)]
    ReplicaUrl(StoreError),
    #[error("could not open the SQLite records store {}", .0.display())]
    SqliteOpen(PathBuf, #[source] StoreError),
    #[error("could not apply migrations to {}", .0.display())]
    SqliteMigrations(PathBuf, #[source] StoreError),
}

/// An opened records store: its ports, and what else the backend can keep.
pub struct Opened {
    pub records: SharedRecordStore,
    /// SQLite only: idempotency records and nonces in the same file, for a server without
    /// Redis, so they survive its restarts.
    pub durable_fast_state: Option<SqliteFastState>,
    /// Postgres with `read_replica`: the audit reads routed to it.
    pub replica: Option<Arc<ReplicaReads>>,
}

/// Opens the records store at `location` and applies its pending migrations. Postgres: creates
/// the database when it does not exist yet (a first run needs no `createdb`), then connects
/// lazily; SQLite: creates the file and its folder when missing.
pub async fn open(
    location: &RecordsLocation,
    settings: &OpenSettings,
) -> Result<Opened, OpenError> {
    if settings.read_replica.is_some() && matches!(location, RecordsLocation::Sqlite(_)) {
        return Err(OpenError::ReplicaWithoutPostgres);
    }
    Ok(match open_backend(location, settings).await? {
        Backend::Postgres(store) => {
            let records: SharedRecordStore = Arc::new(store.clone());
            let replica = match &settings.read_replica {
                Some(read) => Some(
                    super::postgres::open_replica(
                        &read.url,
                        &store,
                        records.clone(),
                        read.max_lag,
                        settings.max_connections,
                    )
                    .map_err(OpenError::ReplicaUrl)?,
                ),
                None => None,
            };
            Opened {
                records,
                durable_fast_state: None,
                replica,
            }
        }
        Backend::Sqlite(store) => Opened {
            durable_fast_state: Some(store.fast_state()),
            records: Arc::new(store),
            replica: None,
        },
    })
}

/// An opened, migrated store as its adapter: for what works below the ports (`copy`).
pub(super) enum Backend {
    Postgres(PostgresStore),
    Sqlite(SqliteStore),
}

pub(super) async fn open_backend(
    location: &RecordsLocation,
    settings: &OpenSettings,
) -> Result<Backend, OpenError> {
    match location {
        RecordsLocation::Postgres(url) => {
            let pg = PostgresSettings {
                max_connections: settings.max_connections,
                ..PostgresSettings::default()
            };
            if PostgresStore::ensure_database(url)
                .await
                .map_err(OpenError::PostgresUnreachable)?
            {
                tracing::info!("created the records database");
            }
            let store = PostgresStore::connect_lazy(url, &pg).map_err(OpenError::PostgresUrl)?;
            store
                .migrate()
                .await
                .map_err(OpenError::PostgresMigrations)?;
            Ok(Backend::Postgres(store))
        }
        RecordsLocation::Sqlite(path) => {
            let store = SqliteStore::open(path, settings.max_connections)
                .await
                .map_err(|e| OpenError::SqliteOpen(path.clone(), e))?;
            store
                .migrate()
                .await
                .map_err(|e| OpenError::SqliteMigrations(path.clone(), e))?;
            Ok(Backend::Sqlite(store))
        }
    }
}
