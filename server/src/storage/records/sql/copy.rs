//! Reading and writing whole tables for `store copy` (shared by both SQL adapters; see the
//! layout in `storage/mod.rs`). How a cell is selected, decoded and bound is the adapter's
//! own (`super`); table and column names come from `storage/records/copy.rs`'s constant list, never
//! from input.

use std::collections::BTreeMap;

use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, QueryBuilder};
use uuid::Uuid;

use super::{Connection, Db, Store};
use crate::storage::StoreError;
use crate::storage::records::copy::{Cell, Sequence, Table};
use crate::storage::records::dialect::Dialect;

/// Every row of `table`, its columns in the table's order.
pub(in crate::storage) fn rows<'c>(
    conn: &'c mut Connection,
    table: &'static Table,
) -> BoxStream<'c, Result<Vec<Cell>, StoreError>> {
    let columns: Vec<String> = table
        .columns
        .iter()
        .map(|(name, kind)| Store::select_column(name, *kind))
        .collect();
    let sql = format!("SELECT {} FROM {}", columns.join(", "), table.name);
    sqlx::query::<Db>(AssertSqlSafe(sql))
        .fetch(conn)
        .map(move |row| -> Result<Vec<Cell>, StoreError> {
            let row = row.map_err(Store::map_err)?;
            table
                .columns
                .iter()
                .enumerate()
                .map(|(i, (_, kind))| Store::decode_cell(&row, i, *kind))
                .collect()
        })
        .boxed()
}

/// Inserts `rows` (a seeded table's rows update theirs, by key); returns the rows written.
pub(in crate::storage) async fn write(
    conn: &mut Connection,
    table: &Table,
    rows: Vec<Vec<Cell>>,
) -> Result<u64, StoreError> {
    if table.seeded {
        let mut written = 0;
        for mut row in rows {
            let key = row.remove(0);
            let mut query = QueryBuilder::<Db>::new(format!("UPDATE {} SET ", table.name));
            for (i, cell) in row.into_iter().enumerate() {
                if i > 0 {
                    query.push(", ");
                }
                query.push(format!("{} = ", table.columns[i + 1].0));
                Store::push_cell(&mut query, cell)?;
            }
            query.push(format!(" WHERE {} = ", table.columns[0].0));
            Store::push_cell(&mut query, key)?;
            let done = query
                .build()
                .execute(&mut *conn)
                .await
                .map_err(Store::map_err)?;
            if done.rows_affected() != 1 {
                return Err(StoreError::Internal(format!(
                    "the target's {} has no row to update",
                    table.name
                )));
            }
            written += 1;
        }
        return Ok(written);
    }
    let names: Vec<&str> = table.columns.iter().map(|(name, _)| *name).collect();
    let mut query = QueryBuilder::<Db>::new(format!(
        "INSERT INTO {} ({}) VALUES ",
        table.name,
        names.join(", ")
    ));
    for (r, row) in rows.into_iter().enumerate() {
        query.push(if r == 0 { "(" } else { ", (" });
        for (i, cell) in row.into_iter().enumerate() {
            if i > 0 {
                query.push(", ");
            }
            Store::push_cell(&mut query, cell)?;
        }
        query.push(")");
    }
    let done = query
        .build()
        .execute(&mut *conn)
        .await
        .map_err(Store::map_err)?;
    Ok(done.rows_affected())
}

/// Sets one column of the row whose key is `key`.
pub(in crate::storage) async fn set(
    conn: &mut Connection,
    table: &Table,
    key: Cell,
    column: usize,
    value: Cell,
) -> Result<(), StoreError> {
    let mut query = QueryBuilder::<Db>::new(format!(
        "UPDATE {} SET {} = ",
        table.name, table.columns[column].0
    ));
    Store::push_cell(&mut query, value)?;
    query.push(format!(" WHERE {} = ", table.columns[0].0));
    Store::push_cell(&mut query, key)?;
    query
        .build()
        .execute(&mut *conn)
        .await
        .map_err(Store::map_err)?;
    Ok(())
}

pub(in crate::storage) async fn has_rows(
    conn: &mut Connection,
    table: &str,
) -> Result<bool, StoreError> {
    let row: Option<(i32,)> =
        sqlx::query_as(AssertSqlSafe(format!("SELECT 1 FROM {table} LIMIT 1")))
            .fetch_optional(&mut *conn)
            .await
            .map_err(Store::map_err)?;
    Ok(row.is_some())
}

pub(in crate::storage) async fn count(
    conn: &mut Connection,
    table: &str,
) -> Result<i64, StoreError> {
    let (n,): (i64,) = sqlx::query_as(AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
        .fetch_one(&mut *conn)
        .await
        .map_err(Store::map_err)?;
    Ok(n)
}

/// Every workspace's audit sequence: its counter, and its events' sequences and ids.
pub(in crate::storage) async fn sequences(
    conn: &mut Connection,
) -> Result<BTreeMap<Uuid, Sequence>, StoreError> {
    let counters: Vec<(Uuid, i64)> = sqlx::query_as("SELECT id, audit_seq FROM workspaces")
        .fetch_all(&mut *conn)
        .await
        .map_err(Store::map_err)?;
    let mut digests: BTreeMap<Uuid, (Sequence, Sha256)> = counters
        .into_iter()
        .map(|(id, counter)| {
            let sequence = Sequence {
                counter,
                ..Sequence::default()
            };
            (id, (sequence, Sha256::new()))
        })
        .collect();
    let mut events = sqlx::query_as::<Db, (Uuid, i64, Uuid)>(
        "SELECT workspace_id, seq, id FROM audit_events WHERE seq IS NOT NULL
         ORDER BY workspace_id, seq",
    )
    .fetch(&mut *conn);
    while let Some((workspace, seq, id)) = events.try_next().await.map_err(Store::map_err)? {
        let (sequence, digest) = digests.entry(workspace).or_default();
        sequence.events += 1;
        sequence.first.get_or_insert(seq);
        sequence.last = Some(seq);
        digest.update(seq.to_be_bytes());
        digest.update(id.as_bytes());
    }
    Ok(digests
        .into_iter()
        .map(|(id, (mut sequence, digest))| {
            sequence.digest = digest.finalize().into();
            (id, sequence)
        })
        .collect())
}
