//! `store copy` on SQLite: how each kind of column is read and written, as the adapter stores
//! it (uuids BLOBs, times RFC 3339 TEXT, lists and JSON as JSON text); the table statements are
//! shared (`storage/records/sql/copy.rs`).

use std::collections::BTreeMap;

use sqlx::sqlite::SqliteRow;
use sqlx::{QueryBuilder, Row as _, Sqlite, Transaction};

use super::{SqliteStore, from_json, map_err, to_json};
use crate::storage::StoreError;
use crate::storage::records::copy::{Cell, Kind};
use crate::storage::records::dialect::Dialect as _;

pub(super) fn decode(row: &SqliteRow, i: usize, kind: Kind) -> Result<Cell, StoreError> {
    let list = |i| -> Result<Option<String>, StoreError> { row.try_get(i).map_err(map_err) };
    Ok(match kind {
        Kind::Uuid => Cell::Uuid(row.try_get(i).map_err(map_err)?),
        Kind::Text => Cell::Text(row.try_get(i).map_err(map_err)?),
        Kind::Json => Cell::Json(row.try_get(i).map_err(map_err)?),
        Kind::Time => Cell::Time(row.try_get(i).map_err(map_err)?),
        Kind::I16 => Cell::I16(row.try_get(i).map_err(map_err)?),
        Kind::I32 => Cell::I32(row.try_get(i).map_err(map_err)?),
        Kind::I64 => Cell::I64(row.try_get(i).map_err(map_err)?),
        Kind::Bool => Cell::Bool(row.try_get(i).map_err(map_err)?),
        Kind::Bytes => Cell::Bytes(row.try_get(i).map_err(map_err)?),
        Kind::TextList => Cell::TextList(list(i)?.map(|raw| from_json(&raw)).transpose()?),
        Kind::UuidList => Cell::UuidList(list(i)?.map(|raw| from_json(&raw)).transpose()?),
    })
}

pub(super) fn push_cell(query: &mut QueryBuilder<Sqlite>, cell: Cell) -> Result<(), StoreError> {
    match cell {
        Cell::Uuid(v) => query.push_bind(v),
        Cell::Text(v) | Cell::Json(v) => query.push_bind(v),
        Cell::Time(v) => query.push_bind(v),
        Cell::I16(v) => query.push_bind(v),
        Cell::I32(v) => query.push_bind(v),
        Cell::I64(v) => query.push_bind(v),
        Cell::Bool(v) => query.push_bind(v),
        Cell::Bytes(v) => query.push_bind(v),
        Cell::TextList(v) => query.push_bind(v.map(|l| to_json(&l)).transpose()?),
        Cell::UuidList(v) => query.push_bind(v.map(|l| to_json(&l)).transpose()?),
    };
    Ok(())
}

/// Every table and its columns, in column order.
pub(in crate::storage) async fn schema(
    store: &SqliteStore,
) -> Result<BTreeMap<String, Vec<String>>, StoreError> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT m.name, c.name FROM sqlite_schema m, pragma_table_info(m.name) c
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
         ORDER BY m.name, c.cid",
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

/// One snapshot for every read, so the copy is of one moment even if something writes.
pub(in crate::storage) async fn begin_snapshot(
    store: &SqliteStore,
) -> Result<Transaction<'static, Sqlite>, StoreError> {
    store.begin_snapshot().await
}

/// A write transaction holding the write lock from its start (the copy is its process's only
/// writer, so it needs no turn among others).
pub(in crate::storage) async fn begin_write(
    store: &SqliteStore,
) -> Result<Transaction<'static, Sqlite>, StoreError> {
    store
        .pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(map_err)
}
