//! Personal access tokens and their grants: the Postgres statements; the rest, with the
//! issuance rules, is shared (`storage/sql/tokens.rs`).

use sqlx::PgConnection;

use self::shared::CredentialRow;
use super::{PostgresStore, map_err};
use crate::storage::{NewToken, StoreError};

// Compiled once per SQL backend (see the layout in `storage/mod.rs`).
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/tokens.rs"]
mod shared;

/// Active grants as an array, in grant order.
const TOKEN_COLUMNS: &str = "t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    ARRAY(SELECT tw.workspace_id FROM token_workspaces tw
          WHERE tw.token_id = t.id AND tw.revoked_at IS NULL ORDER BY tw.position) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at, t.issued_by_token_id";

/// The token and its grants in one round trip.
async fn insert_token_rows(conn: &mut PgConnection, token: &NewToken) -> Result<(), StoreError> {
    let t = &token.record;
    sqlx::query(
        "WITH t AS (
             INSERT INTO tokens (id, public_id, user_id, organisation_id, name, secret_hash, scopes,
                 environment_ids, created_at, expires_at, issued_by_token_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $12) RETURNING id
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
    .bind(t.issued_by_token_id)
    .execute(conn)
    .await
    .map_err(map_err)?;
    Ok(())
}

/// Through the read lane: authentication is the request path's hottest read.
async fn find_credential_row(
    store: &PostgresStore,
    public_id: &str,
) -> Result<Option<CredentialRow>, StoreError> {
    let query = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {TOKEN_COLUMNS}, t.secret_hash FROM tokens t WHERE t.public_id = $1"
    )))
    .bind(public_id);
    store.read_optional(query).await
}
