//! Policy versions, activations and shadows: a change bumps the generation, which the server
//! polls; the rest is shared (`storage/records/sql/policies.rs`).

use sqlx::SqliteConnection;

use super::map_err;
use crate::storage::StoreError;

// Compiled once per SQL backend (see the layout in `storage/mod.rs`).
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/policies.rs"]
mod shared;

/// Bumps the generation, which the server polls to pick changes up.
async fn policy_changed(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    sqlx::query("UPDATE policy_state SET generation = generation + 1 WHERE id = 1")
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// Nothing to do: the write lock, held since BEGIN IMMEDIATE, serialises versions of one name.
async fn serialise_versions(_conn: &mut SqliteConnection, _name: &str) -> Result<(), StoreError> {
    Ok(())
}
