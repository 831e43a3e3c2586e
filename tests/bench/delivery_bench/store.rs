//! The records store the bench runs on: a fresh Postgres database (made and dropped on the
//! server named by `--postgres`) or, with `--sqlite`, an SQLite file in a temporary folder, and
//! `Db`, the bench's own connection to it, which counts rows (deliveries waiting, commands
//! succeeded, leases) and reads each command's span. All of it is set-up, not measured.

use std::time::Duration;

use anyhow::Context;
use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

use super::Args;

/// A fresh records store, and how to take it away.
pub(super) enum Place {
    Postgres { base: String, name: String },
    Sqlite(std::path::PathBuf),
}

/// The same store, read by the benchmark to count what ended (set-up, not measured).
pub(super) enum Db {
    Pg(sqlx::PgPool),
    Lite(sqlx::SqlitePool),
}

impl Db {
    pub(super) async fn count(&self, sql: &str, pool: Uuid) -> anyhow::Result<usize> {
        let (n,): (i64,) = match self {
            Db::Pg(p) => {
                sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(pool)
                    .fetch_one(p)
                    .await?
            }
            Db::Lite(p) => {
                sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(pool)
                    .fetch_one(p)
                    .await?
            }
        };
        Ok(usize::try_from(n).unwrap_or_default())
    }

    /// Lease statements that started a pool's attempts: a lease stamps every attempt it takes
    /// with one `started_at`, so distinct values count leases (ties could only undercount).
    pub(super) async fn leases(&self, pool: Uuid) -> anyhow::Result<usize> {
        self.count(
            "SELECT COUNT(DISTINCT a.started_at) FROM webhook_attempts a
             JOIN webhook_deliveries d ON d.id = a.delivery_id
             JOIN runner_commands c ON c.id = d.command_id WHERE c.pool_id = $1",
            pool,
        )
        .await
    }

    /// From each command's `created_at` to its `updated_at`, for a pool's commands but the
    /// `skip` created first (the warm-up, all ended before the others were submitted).
    pub(super) async fn command_spans(
        &self,
        pool: Uuid,
        skip: usize,
    ) -> anyhow::Result<Vec<Duration>> {
        let sql = "SELECT created_at, updated_at FROM runner_commands WHERE pool_id = $1
                   ORDER BY created_at";
        type Row = (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>);
        let rows: Vec<Row> = match self {
            Db::Pg(p) => sqlx::query_as(sql).bind(pool).fetch_all(p).await?,
            Db::Lite(p) => sqlx::query_as(sql).bind(pool).fetch_all(p).await?,
        };
        Ok(rows
            .into_iter()
            .skip(skip)
            .map(|(a, b)| (b - a).to_std().unwrap_or_default())
            .collect())
    }
}

pub(super) async fn fresh_store(args: &Args) -> anyhow::Result<(String, Place)> {
    if args.sqlite {
        let dir =
            std::env::temp_dir().join(format!("cp-delivery-bench-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let url = format!("sqlite://{}", dir.join("cp.db").display());
        return Ok((url, Place::Sqlite(dir)));
    }
    let base = args.postgres.trim_end_matches('/').to_owned();
    let name = format!("cp_delivery_bench_{}", Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&format!("{base}/postgres"))
        .await
        .context("Postgres does not answer (--sqlite runs on the embedded store)")?;
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await?;
    Ok((format!("{base}/{name}"), Place::Postgres { base, name }))
}

pub(super) async fn remove_store(place: Place) {
    match place {
        Place::Sqlite(dir) => {
            let _ = std::fs::remove_dir_all(dir);
        }
        Place::Postgres { base, name } => {
            if let Ok(mut admin) = PgConnection::connect(&format!("{base}/postgres")).await {
                let _ = admin
                    .execute(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .await;
            }
        }
    }
}
