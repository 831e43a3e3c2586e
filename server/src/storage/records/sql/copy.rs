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

use super::Stmt;
use crate::storage::StoreError;
use crate::storage::records::copy::{Cell, Sequence, Table};
use crate::storage::records::dialect::{Conn, Dialect};

/// Every row of `table`, its columns in the table's order.
pub(in crate::storage) fn rows<'c, S: Dialect>(
    conn: &'c mut Conn<S>,
    table: &'static Table,
) -> BoxStream<'c, Result<Vec<Cell>, StoreError>> {
    let columns: Vec<String> = table
        .columns
        .iter()
        .map(|(name, kind)| S::select_column(name, *kind))
        .collect();
    let sql = format!("SELECT {} FROM {}", columns.join(", "), table.name);
    S::fetch_rows(sqlx::query(AssertSqlSafe(sql)), conn)
        .map(move |row| -> Result<Vec<Cell>, StoreError> {
            let row = row?;
            table
                .columns
                .iter()
                .enumerate()
                .map(|(i, (_, kind))| S::decode_cell(&row, i, *kind))
                .collect()
        })
        .boxed()
}

/// Inserts `rows` (a seeded table's rows update theirs, by key); returns the rows written.
pub(in crate::storage) async fn write<S: Dialect>(
    conn: &mut Conn<S>,
    table: &Table,
    rows: Vec<Vec<Cell>>,
) -> Result<u64, StoreError> {
    if table.seeded {
        let mut written = 0;
        for mut row in rows {
            let key = row.remove(0);
            let mut query = QueryBuilder::<S::DB>::new(format!("UPDATE {} SET ", table.name));
            for (i, cell) in row.into_iter().enumerate() {
                if i > 0 {
                    query.push(", ");
                }
                query.push(format!("{} = ", table.columns[i + 1].0));
                S::push_cell(&mut query, cell)?;
            }
            query.push(format!(" WHERE {} = ", table.columns[0].0));
            S::push_cell(&mut query, key)?;
            let done = Stmt::<S>::from_query(query.build())
                .execute(&mut *conn)
                .await?;
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
    let mut query = QueryBuilder::<S::DB>::new(format!(
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
            S::push_cell(&mut query, cell)?;
        }
        query.push(")");
    }
    let done = Stmt::<S>::from_query(query.build())
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}

/// Sets one column of the row whose key is `key`.
pub(in crate::storage) async fn set<S: Dialect>(
    conn: &mut Conn<S>,
    table: &Table,
    key: Cell,
    column: usize,
    value: Cell,
) -> Result<(), StoreError> {
    let mut query = QueryBuilder::<S::DB>::new(format!(
        "UPDATE {} SET {} = ",
        table.name, table.columns[column].0
    ));
    S::push_cell(&mut query, value)?;
    query.push(format!(" WHERE {} = ", table.columns[0].0));
    S::push_cell(&mut query, key)?;
    Stmt::<S>::from_query(query.build())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub(in crate::storage) async fn has_rows<S: Dialect>(
    conn: &mut Conn<S>,
    table: &str,
) -> Result<bool, StoreError> {
    let row: Option<(i32,)> = S::query(AssertSqlSafe(format!("SELECT 1 FROM {table} LIMIT 1")))
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.is_some())
}

pub(in crate::storage) async fn count<S: Dialect>(
    conn: &mut Conn<S>,
    table: &str,
) -> Result<i64, StoreError> {
    let (n,): (i64,) = S::query(AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
        .fetch_one(&mut *conn)
        .await?;
    Ok(n)
}

/// Every workspace's audit sequence: its counter, and its events' sequences and ids.
pub(in crate::storage) async fn sequences<S: Dialect>(
    conn: &mut Conn<S>,
) -> Result<BTreeMap<Uuid, Sequence>, StoreError> {
    let counters: Vec<(Uuid, i64)> = S::query("SELECT id, audit_seq FROM workspaces")
        .fetch_all(&mut *conn)
        .await?;
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
    let mut events = S::fetch_rows(
        sqlx::query(
            "SELECT workspace_id, seq, id FROM audit_events WHERE seq IS NOT NULL
             ORDER BY workspace_id, seq",
        ),
        &mut *conn,
    );
    while let Some(row) = events.try_next().await? {
        let (workspace, seq, id): (Uuid, i64, Uuid) = S::decode_row(&row)?;
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
