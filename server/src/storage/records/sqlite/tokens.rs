//! Personal access tokens and their grants: the SQLite statements; the rest, with the issuance
//! rules, is shared (`storage/records/sql/tokens.rs`).

use sqlx::SqliteConnection;

use super::{map_err, to_json};
use crate::storage::{NewToken, StoreError};

/// Active grants in grant order, as a JSON array of hex uuids (JSON cannot hold BLOBs).
pub(super) const TOKEN_COLUMNS: &str =
    "t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    (SELECT json_group_array(lower(hex(tw.workspace_id)) ORDER BY tw.position)
     FROM token_workspaces tw
     WHERE tw.token_id = t.id AND tw.revoked_at IS NULL) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at, t.issued_by_token_id";

/// The token, then its grants: json_each's key is the array index, the grant's position.
pub(super) async fn insert_token_rows(
    conn: &mut SqliteConnection,
    token: &NewToken,
) -> Result<(), StoreError> {
    let t = &token.record;
    sqlx::query(
        "INSERT INTO tokens (id, public_id, user_id, organisation_id, name, secret_hash, scopes,
             environment_ids, created_at, expires_at, issued_by_token_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
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
    .bind(t.issued_by_token_id)
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    sqlx::query(
        "INSERT INTO token_workspaces (token_id, workspace_id, position)
         SELECT $1, unhex(replace(value, '-', '')), key FROM json_each($2)",
    )
    .bind(t.id)
    .bind(to_json(&t.workspace_ids)?)
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(())
}
