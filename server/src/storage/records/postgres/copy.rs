//! `store copy` on Postgres: how each kind of column is read and written (jsonb as its text,
//! lists as arrays), the snapshot and write transactions without the statement timeout, and
//! serial columns moved past the copied ids; the table statements are shared
//! (`storage/records/sql/copy.rs`).

use std::collections::BTreeMap;

use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, PgConnection, Postgres, QueryBuilder, Row as _, Transaction};

use super::{PostgresStore, map_err};
use crate::storage::StoreError;
use crate::storage::records::copy::{Cell, Kind, Table};
use crate::storage::records::dialect::Dialect as _;

/// jsonb is read as its text, so it crosses without being parsed.
pub(super) fn select_column(name: &str, kind: Kind) -> String {
    match kind {
        Kind::Json => format!("CAST({name} AS TEXT)"),
        _ => name.to_owned(),
    }
}

pub(super) fn decode(row: &PgRow, i: usize, kind: Kind) -> Result<Cell, StoreError> {
    let get = map_err;
    Ok(match kind {
        Kind::Uuid => Cell::Uuid(row.try_get(i).map_err(get)?),
        Kind::Text => Cell::Text(row.try_get(i).map_err(get)?),
        Kind::Json => Cell::Json(row.try_get(i).map_err(get)?),
        Kind::Time => Cell::Time(row.try_get(i).map_err(get)?),
        Kind::I16 => Cell::I16(row.try_get(i).map_err(get)?),
        Kind::I32 => Cell::I32(row.try_get(i).map_err(get)?),
        Kind::I64 => Cell::I64(row.try_get(i).map_err(get)?),
        Kind::Bool => Cell::Bool(row.try_get(i).map_err(get)?),
        Kind::Bytes => Cell::Bytes(row.try_get(i).map_err(get)?),
        Kind::TextList => Cell::TextList(row.try_get(i).map_err(get)?),
        Kind::UuidList => Cell::UuidList(row.try_get(i).map_err(get)?),
    })
}

pub(super) fn push_cell(query: &mut QueryBuilder<Postgres>, cell: Cell) -> Result<(), StoreError> {
    match cell {
        Cell::Uuid(v) => query.push_bind(v),
        Cell::Text(v) => query.push_bind(v),
        // Postgres parses the stored text itself, as it would the adapter's.
        Cell::Json(v) => query.push("CAST(").push_bind(v).push(" AS jsonb)"),
        Cell::Time(v) => query.push_bind(v),
        Cell::I16(v) => query.push_bind(v),
        Cell::I32(v) => query.push_bind(v),
        Cell::I64(v) => query.push_bind(v),
        Cell::Bool(v) => query.push_bind(v),
        Cell::Bytes(v) => query.push_bind(v),
        Cell::TextList(v) => query.push_bind(v),
        Cell::UuidList(v) => query.push_bind(v),
    };
    Ok(())
}

/// Every table of the current schema and its columns, in column order.
pub(in crate::storage) async fn schema(
    store: &PostgresStore,
) -> Result<BTreeMap<String, Vec<String>>, StoreError> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(table_name AS TEXT), CAST(column_name AS TEXT)
         FROM information_schema.columns WHERE table_schema = current_schema()
         ORDER BY table_name, ordinal_position",
    )
    .fetch_all(&store.pool)
    .await
    .map_err(map_err)?;
    let mut schema: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (table, column) in rows {
        schema.entry(table).or_default().push(column);
    }
    Ok(schema)
}

/// A copy reads and writes whole tables: no statement timeout, and its snapshot may sit idle
/// while the other store writes what it read.
async fn untimed(tx: &mut Transaction<'static, Postgres>) -> Result<(), StoreError> {
    sqlx::query("SET LOCAL statement_timeout = 0")
        .execute(&mut **tx)
        .await
        .map_err(map_err)?;
    sqlx::query("SET LOCAL idle_in_transaction_session_timeout = 0")
        .execute(&mut **tx)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// One snapshot for every read, so the copy is of one moment even if something writes.
pub(in crate::storage) async fn begin_snapshot(
    store: &PostgresStore,
) -> Result<Transaction<'static, Postgres>, StoreError> {
    let mut tx = store.begin_snapshot().await?;
    untimed(&mut tx).await?;
    Ok(tx)
}

pub(in crate::storage) async fn begin_write(
    store: &PostgresStore,
) -> Result<Transaction<'static, Postgres>, StoreError> {
    // The copy's own transaction, committed by the copy: no request's write context.
    let mut tx = store.pool.begin().await.map_err(map_err)?;
    untimed(&mut tx).await?;
    Ok(tx)
}

/// Moves each serial or identity column of the copied tables past the highest copied id, so
/// the next row gets a new one.
pub(in crate::storage) async fn advance_serials(
    conn: &mut PgConnection,
    tables: &[Table],
) -> Result<(), StoreError> {
    let serials: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(table_name AS TEXT), CAST(column_name AS TEXT)
         FROM information_schema.columns
         WHERE table_schema = current_schema()
           AND (column_default LIKE 'nextval(%' OR is_identity = 'YES')",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(map_err)?;
    for (table, column) in serials {
        let Some(table) = tables.iter().find(|t| t.name == table) else {
            continue;
        };
        let Some((column, _)) = table.columns.iter().find(|(c, _)| *c == column) else {
            continue;
        };
        sqlx::query(AssertSqlSafe(format!(
            "SELECT setval(pg_get_serial_sequence($1, $2),
                 COALESCE((SELECT MAX({column}) FROM {name}), 0) + 1, false)",
            name = table.name
        )))
        .bind(table.name)
        .bind(*column)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    }
    Ok(())
}
