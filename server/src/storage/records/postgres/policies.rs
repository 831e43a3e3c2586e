//! Policy versions, activations and shadows: how a change is announced (NOTIFY on
//! [`POLICY_CHANNEL`]) and how versions of one name are serialised; the rest is shared
//! (`storage/records/sql/policies.rs`).

use sqlx::PgConnection;

use super::map_err;
use crate::storage::StoreError;

/// Channel on which policy changes are announced.
pub const POLICY_CHANNEL: &str = "cp_policy";

/// Bumps the generation and notifies replicas; both take effect at commit.
pub(super) async fn policy_changed(conn: &mut PgConnection) -> Result<(), StoreError> {
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

/// Serialises new versions of one name until commit.
pub(super) async fn serialise_versions(
    conn: &mut PgConnection,
    name: &str,
) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(name)
        .execute(conn)
        .await
        .map_err(map_err)?;
    Ok(())
}
