//! Copying every record from one records store to another (`cpctl store copy`), so moving from
//! the embedded default to Postgres keeps tokens, policies and the audit log.
//!
//! Table-driven: [`TABLES`] names each copied table with its columns and their kinds, in
//! dependency order, and [`NOT_COPIED`] each table deliberately left behind, with why. Both
//! stores' schemas are checked against the two lists before anything is written, so a table or
//! column that a migration adds and the copy does not know stops the copy instead of being
//! lost (and the guard tests fail first).
//!
//! Values cross as typed cells: each backend decodes a column of a kind to the same Rust value
//! its adapter reads, and encodes it as its adapter writes it (uuid BLOB or uuid, RFC 3339 TEXT
//! or timestamptz, JSON text or array, JSON text or jsonb). Event data is carried as the stored
//! JSON text, never re-serialised, so numbers keep their digits.
//!
//! The source is read in one snapshot; the target is written in one transaction, verified in
//! it (row counts per table, every workspace's audit sequence and counter) and committed only
//! then: a copy that fails, is interrupted or does not verify leaves the target as it found
//! it (migrated, empty), and can simply be run again.

use std::collections::BTreeMap;

use futures_util::TryStreamExt;
use sqlx::{Postgres, Sqlite, Transaction};
use uuid::Uuid;

mod tables;

use super::{PostgresStore, SqliteStore, postgres, sql, sqlite};
use crate::storage::open::{Backend, open_backend};
use crate::storage::{OpenError, OpenSettings, RecordsLocation, StoreError};

pub(crate) use self::tables::{Cell, Kind, NOT_COPIED, TABLES, Table};

/// Why a copy did not happen; each says what to do. Nothing was written to the target.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("cannot open the source store (--from)")]
    OpenSource(#[source] OpenError),
    #[error("cannot open the target store (--to)")]
    OpenTarget(#[source] OpenError),
    #[error(
        "the target store is not empty (table {0} has rows): copy into a freshly created database"
    )]
    TargetNotEmpty(&'static str),
    #[error("{0}")]
    UnknownSchema(String),
    #[error("the copy did not verify, nothing was committed: {0}")]
    Mismatch(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What was copied: each table with its rows, in copy order, and the workspaces whose audit
/// sequence was verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyReport {
    pub tables: Vec<(&'static str, u64)>,
    pub workspaces_verified: usize,
}

/// The audit sequence of one workspace as a store holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Sequence {
    /// `workspaces.audit_seq`: the last sequence handed out.
    pub(crate) counter: i64,
    pub(crate) events: i64,
    pub(crate) first: Option<i64>,
    pub(crate) last: Option<i64>,
    /// SHA-256 over each event's (sequence, id), in sequence order.
    pub(crate) digest: [u8; 32],
}

/// Rows per INSERT: far below both backends' limits on bound parameters (SQLite 32766,
/// Postgres 65535) for the widest table.
const BATCH: usize = 500;

/// Checks a store's tables and columns against [`TABLES`] and [`NOT_COPIED`]: every table is
/// one of them, and a copied table has exactly the listed columns.
pub(crate) fn check_schema(
    store: &str,
    schema: &BTreeMap<String, Vec<String>>,
) -> Result<(), CopyError> {
    let mut problems = Vec::new();
    for (table, columns) in schema {
        if NOT_COPIED.iter().any(|(name, _)| name == table) {
            continue;
        }
        let Some(known) = TABLES.iter().find(|t| t.name == table) else {
            problems.push(format!("table {table} is not copied"));
            continue;
        };
        let mut have: Vec<&str> = columns.iter().map(String::as_str).collect();
        let mut want: Vec<&str> = known.columns.iter().map(|(c, _)| *c).collect();
        have.sort_unstable();
        want.sort_unstable();
        if have != want {
            problems.push(format!(
                "table {table} has columns {have:?}, the copy knows {want:?}"
            ));
        }
    }
    for table in TABLES {
        if !schema.contains_key(table.name) {
            problems.push(format!("table {} is missing", table.name));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(CopyError::UnknownSchema(format!(
        "the {store} schema does not match what `store copy` knows ({}); list the table in \
         TABLES or NOT_COPIED of server/src/storage/records/copy.rs",
        problems.join("; ")
    )))
}

/// Copies every record of `from` into `to`, which must hold none. Both are migrated first, as
/// the server does at start.
pub async fn copy_records(
    from: &RecordsLocation,
    to: &RecordsLocation,
) -> Result<CopyReport, CopyError> {
    // One connection each would do; a few spare keep opening simple.
    let settings = OpenSettings {
        max_connections: 4,
        read_replica: None,
    };
    let source = open_backend(from, &settings)
        .await
        .map_err(CopyError::OpenSource)?;
    let target = open_backend(to, &settings)
        .await
        .map_err(CopyError::OpenTarget)?;
    check_schema(source.name(), &source.schema().await?)?;
    check_schema(target.name(), &target.schema().await?)?;

    let mut read = source.begin_snapshot().await?;
    let mut write = target.begin_write().await?;
    for table in TABLES.iter().filter(|t| !t.seeded) {
        if write.has_rows(table.name).await? {
            return Err(CopyError::TargetNotEmpty(table.name));
        }
    }

    let mut report = CopyReport {
        tables: Vec::with_capacity(TABLES.len()),
        workspaces_verified: 0,
    };
    for (done, table) in TABLES.iter().enumerate() {
        let rows = copy_table(&mut read, &mut write, table).await?;
        report.tables.push((table.name, rows));
        crash_after(done + 1);
    }
    write.after_copy().await?;

    // Verify in the same transaction: a mismatch rolls the copy back.
    for (name, rows) in &report.tables {
        let (had, has) = (read.count(name).await?, write.count(name).await?);
        if had != *rows as i64 || has != had {
            return Err(CopyError::Mismatch(format!(
                "table {name}: {had} rows in the source, {rows} copied, {has} in the target"
            )));
        }
    }
    let (had, has) = (read.sequences().await?, write.sequences().await?);
    for (workspace, expected) in &had {
        match has.get(workspace) {
            Some(found) if found == expected && found.counter >= found.last.unwrap_or(0) => {}
            found => {
                return Err(CopyError::Mismatch(format!(
                    "audit sequence of workspace {workspace}: source {expected:?}, target {found:?}"
                )));
            }
        }
    }
    if has.len() != had.len() {
        return Err(CopyError::Mismatch(format!(
            "{} workspaces with an audit sequence in the source, {} in the target",
            had.len(),
            has.len()
        )));
    }
    report.workspaces_verified = had.len();
    write.commit().await?;
    read.finish().await?;
    Ok(report)
}

async fn copy_table(
    read: &mut Tx,
    write: &mut Tx,
    table: &'static Table,
) -> Result<u64, StoreError> {
    let deferred: Vec<usize> = table
        .deferred
        .iter()
        .filter_map(|d| table.columns.iter().position(|(c, _)| c == d))
        .collect();
    // (key, column index, value) of each deferred self-reference.
    let mut later: Vec<(Cell, usize, Cell)> = Vec::new();
    let mut batch: Vec<Vec<Cell>> = Vec::with_capacity(BATCH);
    let mut copied = 0u64;
    let mut rows = read.rows(table);
    while let Some(mut row) = rows.try_next().await? {
        for &i in &deferred {
            if !row[i].is_null() {
                let null = row[i].null_like();
                let value = std::mem::replace(&mut row[i], null);
                later.push((row[0].clone(), i, value));
            }
        }
        batch.push(row);
        if batch.len() == BATCH {
            copied += write.write(table, &mut batch).await?;
        }
    }
    drop(rows);
    copied += write.write(table, &mut batch).await?;
    for (key, column, value) in later {
        write.set(table, key, column, value).await?;
    }
    Ok(copied)
}

/// Test hook: with `CP_STORE_COPY_CRASH_AFTER_TABLES=N`, the process aborts after copying N
/// tables, mid-transaction, as a killed copy would. Debug builds only.
#[cfg(debug_assertions)]
fn crash_after(tables: usize) {
    let crash_at = std::env::var("CP_STORE_COPY_CRASH_AFTER_TABLES")
        .ok()
        .and_then(|n| n.parse::<usize>().ok());
    if crash_at == Some(tables) {
        std::process::abort();
    }
}

#[cfg(not(debug_assertions))]
fn crash_after(_tables: usize) {}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::Postgres(_) => "Postgres",
            Backend::Sqlite(_) => "SQLite",
        }
    }

    async fn schema(&self) -> Result<BTreeMap<String, Vec<String>>, StoreError> {
        match self {
            Backend::Postgres(store) => postgres::copy::schema(store).await,
            Backend::Sqlite(store) => sqlite::copy::schema(store).await,
        }
    }

    async fn begin_snapshot(&self) -> Result<Tx, StoreError> {
        Ok(match self {
            Backend::Postgres(store) => Tx::Postgres(postgres::copy::begin_snapshot(store).await?),
            Backend::Sqlite(store) => Tx::Sqlite(sqlite::copy::begin_snapshot(store).await?),
        })
    }

    async fn begin_write(&self) -> Result<Tx, StoreError> {
        Ok(match self {
            Backend::Postgres(store) => Tx::Postgres(postgres::copy::begin_write(store).await?),
            Backend::Sqlite(store) => Tx::Sqlite(sqlite::copy::begin_write(store).await?),
        })
    }
}

/// A transaction on either backend; each method is the shared statement (`sql/copy.rs`) of
/// that backend.
enum Tx {
    Postgres(Transaction<'static, Postgres>),
    Sqlite(Transaction<'static, Sqlite>),
}

type Rows<'c> = futures_util::stream::BoxStream<'c, Result<Vec<Cell>, StoreError>>;

impl Tx {
    fn rows(&mut self, table: &'static Table) -> Rows<'_> {
        match self {
            Tx::Postgres(tx) => sql::copy::rows::<PostgresStore>(tx, table),
            Tx::Sqlite(tx) => sql::copy::rows::<SqliteStore>(tx, table),
        }
    }

    async fn write(&mut self, table: &Table, rows: &mut Vec<Vec<Cell>>) -> Result<u64, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let rows = std::mem::take(rows);
        match self {
            Tx::Postgres(tx) => sql::copy::write::<PostgresStore>(tx, table, rows).await,
            Tx::Sqlite(tx) => sql::copy::write::<SqliteStore>(tx, table, rows).await,
        }
    }

    async fn set(
        &mut self,
        table: &Table,
        key: Cell,
        column: usize,
        value: Cell,
    ) -> Result<(), StoreError> {
        match self {
            Tx::Postgres(tx) => {
                sql::copy::set::<PostgresStore>(tx, table, key, column, value).await
            }
            Tx::Sqlite(tx) => sql::copy::set::<SqliteStore>(tx, table, key, column, value).await,
        }
    }

    async fn has_rows(&mut self, table: &str) -> Result<bool, StoreError> {
        Ok(match self {
            Tx::Postgres(tx) => sql::copy::has_rows::<PostgresStore>(tx, table).await?,
            Tx::Sqlite(tx) => sql::copy::has_rows::<SqliteStore>(tx, table).await?,
        })
    }

    async fn count(&mut self, table: &str) -> Result<i64, StoreError> {
        match self {
            Tx::Postgres(tx) => sql::copy::count::<PostgresStore>(tx, table).await,
            Tx::Sqlite(tx) => sql::copy::count::<SqliteStore>(tx, table).await,
        }
    }

    async fn sequences(&mut self) -> Result<BTreeMap<Uuid, Sequence>, StoreError> {
        match self {
            Tx::Postgres(tx) => sql::copy::sequences::<PostgresStore>(tx).await,
            Tx::Sqlite(tx) => sql::copy::sequences::<SqliteStore>(tx).await,
        }
    }

    /// Postgres: serial columns continue after the copied ids (SQLite's AUTOINCREMENT follows
    /// inserted ids by itself).
    async fn after_copy(&mut self) -> Result<(), StoreError> {
        match self {
            Tx::Postgres(tx) => postgres::copy::advance_serials(tx, TABLES).await,
            Tx::Sqlite(_) => Ok(()),
        }
    }

    async fn commit(self) -> Result<(), StoreError> {
        match self {
            Tx::Postgres(tx) => tx.commit().await.map_err(postgres::map_err),
            Tx::Sqlite(tx) => tx.commit().await.map_err(sqlite::map_err),
        }
    }

    /// Ends a read snapshot.
    async fn finish(self) -> Result<(), StoreError> {
        match self {
            Tx::Postgres(tx) => tx.rollback().await.map_err(postgres::map_err),
            Tx::Sqlite(tx) => tx.rollback().await.map_err(sqlite::map_err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Kind::{Bool, Bytes, I16, I32, I64, Json, Text, TextList, Time, UuidList};

    /// The guard: a migration that adds a table or a column fails here until the table is in
    /// TABLES (with its columns) or in NOT_COPIED. The Postgres schema is checked by the copy
    /// itself, which admin-cli's store tests run against a fresh Postgres database. Also: each
    /// table comes after the tables it refers to (a reference to itself is deferred).
    #[tokio::test]
    async fn every_table_of_the_sqlite_schema_is_copied_or_deliberately_not() {
        let dir = std::env::temp_dir().join(format!("cp-copy-{}", Uuid::new_v4().simple()));
        let store = sqlite::SqliteStore::open(&dir.join("cp.db"), 1)
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let schema = sqlite::copy::schema(&store).await.unwrap();
        // Tables copied before what they refer to, and columns of the wrong kind.
        let mut misordered = Vec::new();
        let mut references_seen = 0;
        for (i, table) in TABLES.iter().enumerate() {
            let references: Vec<(String, String)> =
                sqlx::query_as("SELECT \"table\", \"from\" FROM pragma_foreign_key_list($1)")
                    .bind(table.name)
                    .fetch_all(store.pool())
                    .await
                    .unwrap();
            references_seen += references.len();
            for (to, column) in references {
                let earlier = TABLES[..i].iter().any(|t| t.name == to);
                let deferred = to == table.name && table.deferred.contains(&column.as_str());
                if !earlier && !deferred {
                    misordered.push(format!("{}.{column} -> {to}", table.name));
                }
            }
        }
        // Each kind is what the SQLite adapter stores it as.
        for table in TABLES {
            for (column, kind) in table.columns {
                let declared: Option<(String,)> =
                    sqlx::query_as("SELECT type FROM pragma_table_info($1) WHERE name = $2")
                        .bind(table.name)
                        .bind(*column)
                        .fetch_optional(store.pool())
                        .await
                        .unwrap();
                let stored = match kind {
                    Kind::Uuid | Bytes => "BLOB",
                    I16 | I32 | I64 | Bool => "INTEGER",
                    Text | Time | Json | TextList | UuidList => "TEXT",
                };
                if declared.as_ref().is_none_or(|(d,)| d != stored) {
                    misordered.push(format!("{}.{column} is {declared:?}", table.name));
                }
            }
        }
        let checked = check_schema("SQLite", &schema);
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = checked {
            panic!("{e}");
        }
        assert!(
            misordered.is_empty(),
            "misordered or mistyped: {misordered:?}"
        );
        assert!(references_seen > 20, "{references_seen} references read");
        assert!(schema.contains_key("tokens") && schema.contains_key("embedded_nonces"));
    }

    #[test]
    fn an_unknown_table_or_column_is_named() {
        let mut schema: BTreeMap<String, Vec<String>> = TABLES
            .iter()
            .map(|t| {
                let columns = t.columns.iter().map(|(c, _)| c.to_string()).collect();
                (t.name.to_owned(), columns)
            })
            .collect();
        assert!(check_schema("test", &schema).is_ok());
        schema.insert("a_future_table".into(), vec!["key".into()]);
        schema.get_mut("tokens").unwrap().push("colour".into());
        let err = check_schema("test", &schema).unwrap_err().to_string();
        assert!(err.contains("table a_future_table is not copied"), "{err}");
        assert!(err.contains("colour"), "{err}");
    }
}
