//! Where the records and the fast state live: opening the records store (and locking an
//! embedded one to this process), choosing the fast state, and the key-encryption key that
//! unwraps every other key kept in the store.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::config::ServerConfig;
use crate::domain::KeyEncryptionKey;
use crate::storage::{
    FastState, MemoryFastState, OpenSettings, Opened, RedisFastState, RedisLocation,
    SharedRecordStore, SqliteFastState,
};

/// The embedded store keeps rate limits and the audit fan-out in this process, so a second
/// server on the same file would split them: refuse it. `cpctl store copy` takes it too, so
/// no server writes to a store while it is copied.
pub fn lock_embedded_store(path: &std::path::Path) -> anyhow::Result<std::fs::File> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".server-lock");
    let file = crate::storage::embedded_files::open_private_file(std::path::Path::new(&lock_path))
        .with_context(|| {
            format!(
                "could not open {}",
                std::path::Path::new(&lock_path).display()
            )
        })?;
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return lock_refused(path, e),
        }
    }
}

/// How long a starting server waits for the embedded store's lock before it refuses: the
/// server it replaces may still be exiting (a supervisor's restart), and a process that spawns
/// children holds the lock in each until it execs, since the descriptor is inherited until
/// then. A second server that stays is refused after this wait.
const LOCK_WAIT: Duration = Duration::from_secs(2);

fn lock_refused(path: &std::path::Path, e: std::fs::TryLockError) -> anyhow::Result<std::fs::File> {
    match e {
        std::fs::TryLockError::WouldBlock => anyhow::bail!(
            "another control-plane server is already using {}: the embedded store serves one \
             process (rate limits live in it). To run several replicas, use \
             Postgres and Redis (set DATABASE_URL and REDIS_URL; see docs/operations.md)",
            path.display()
        ),
        std::fs::TryLockError::Error(e) => {
            Err(e).with_context(|| format!("could not lock {}", path.display()))
        }
    }
}

/// Opens the records store the configuration names and applies its migrations (without the
/// read replica: `cpctl` reads the primary).
pub async fn open_store(config: &ServerConfig) -> anyhow::Result<SharedRecordStore> {
    Ok(open_records(config, false).await?.records)
}

/// Opens the records store, and with `replica` the read replica the configuration names.
pub(super) async fn open_records(config: &ServerConfig, replica: bool) -> anyhow::Result<Opened> {
    let read_replica = match &config.read_database_url {
        Some(url) if replica => Some(crate::storage::ReadReplica {
            url: url.clone(),
            max_lag: Duration::from_millis(config.read_replica_max_lag_ms),
        }),
        _ => None,
    };
    let settings = OpenSettings {
        max_connections: config.db_max_connections,
        read_replica,
    };
    Ok(crate::storage::open(&config.records(), &settings).await?)
}

/// Where idempotency records, rate limits and nonces live: Redis when configured (shared by
/// replicas); else the SQLite file for records and nonces, so a restart keeps them, with rate
/// limits in process; else (Postgres without Redis) all in process, forgotten on restart.
pub(super) fn fast_state(
    config: &ServerConfig,
    durable: Option<SqliteFastState>,
) -> anyhow::Result<FastState> {
    if let Some(url) = config.redis_url.as_deref() {
        let location = RedisLocation::parse(url)?;
        // A brace in the prefix would become every key's hash tag: one slot for everything.
        anyhow::ensure!(
            !config.redis_prefix.contains(['{', '}']),
            "CP_REDIS_PREFIX must not contain '{{' or '}}': Redis Cluster would hash every key by it"
        );
        tracing::info!(fast_state = %location, "idempotency records, rate limits and nonces live in Redis");
        return Ok(FastState::redis(Arc::new(RedisFastState::new(
            &location,
            Duration::from_secs(1),
        )?)));
    }
    let in_process = Arc::new(MemoryFastState::default());
    Ok(match durable {
        Some(durable) => {
            tracing::info!(
                "no REDIS_URL: idempotency records and nonces live in the SQLite file, rate limits in this process (one replica only)"
            );
            durable.purge_every(Duration::from_secs(config.embedded_purge_secs));
            FastState::embedded(Arc::new(durable), in_process)
        }
        None => {
            tracing::info!(
                "no REDIS_URL: idempotency records, rate limits and nonces live in this process (one replica only; a restart forgets them)"
            );
            FastState::memory(in_process)
        }
    })
}

/// The key-encryption key: configured, or read from its owner-only file, which is created with
/// a new key on first start (and said once: replicas and `cpctl` need the same key).
pub fn key_encryption_key(config: &ServerConfig) -> anyhow::Result<KeyEncryptionKey> {
    if let Some(text) = config
        .key_encryption_key
        .as_deref()
        .filter(|k| !k.trim().is_empty())
    {
        return KeyEncryptionKey::from_base64(text).map_err(anyhow::Error::msg);
    }
    let path = config.key_file();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::storage::embedded_files::create_private_dir(dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
    }
    let (text, created) = crate::storage::embedded_files::read_or_create_key_file(&path, || {
        KeyEncryptionKey::generate().1
    })
    .map_err(anyhow::Error::msg)?;
    if created {
        tracing::warn!(
            path = %path.display(),
            "generated a key-encryption key: every replica and cpctl need the same one \
             (CP_KEY_ENCRYPTION_KEY or this file); keep it apart from the records store's backups"
        );
    }
    KeyEncryptionKey::from_base64(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
