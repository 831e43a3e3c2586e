//! Runner pools, runners and keys, commands and their deliveries: the statements are shared
//! (`storage/records/sql/runners.rs`, `sql/commands.rs`); what is Postgres's own is that runners' reports run in batches
//! (`throughput/write_batcher.rs`). A batch of reports is four statements whatever its size: lock every delivery
//! and its command in delivery id order and read their states, update the accepted deliveries
//! and their commands, insert their events, commit. [`rules::report_applies`] decides each.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::audit::write_events;
use super::throughput::{Kind, Ran};
use super::{PostgresStore, map_err};
use crate::domain::{CommandStatus, DeliveryStatus, rules};
use crate::storage::WriteContext;
use crate::storage::records::rows::{DeliveryRow, parse_state};
use crate::storage::{DeliveryTransition, StoreError};

/// Runners' delivery reports, in batches.
pub(super) struct Reports;

/// Runs a report in a batch; `None` when it must run alone (see `throughput/write_batcher.rs`).
pub(super) async fn batch_transition_delivery(
    store: &PostgresStore,
    write: &WriteContext,
    t: &DeliveryTransition,
) -> Option<Result<Option<DeliveryRow>, StoreError>> {
    store
        .reports
        .submit(&store.pool, &store.sequencer, write, t.clone())
        .await
}

#[async_trait::async_trait]
impl Kind for Reports {
    type Job = DeliveryTransition;
    type Verdict = Option<DeliveryRow>;
    const WHAT: &'static str = "report";

    fn key(job: &DeliveryTransition) -> Uuid {
        job.delivery_id
    }

    async fn run(
        tx: &mut PgConnection,
        jobs: &[DeliveryTransition],
    ) -> Result<Ran<Self::Verdict>, StoreError> {
        report_batch(tx, jobs).await
    }
}

/// All `jobs` in the batch's transaction: the verdict of each, in order.
async fn report_batch(
    tx: &mut PgConnection,
    jobs: &[DeliveryTransition],
) -> Result<Ran<Option<DeliveryRow>>, StoreError> {
    // In delivery id order, each delivery before its command (as a report alone and the
    // timeout sweep take them), so batches cannot deadlock with each other.
    let states: Vec<(Uuid, String, String)> = sqlx::query_as(
        "SELECT d.id, d.status, c.status FROM webhook_deliveries d
         JOIN runner_commands c ON c.id = d.command_id
         WHERE d.id = ANY($1) ORDER BY d.id FOR UPDATE",
    )
    .bind(jobs.iter().map(|t| t.delivery_id).collect::<Vec<Uuid>>())
    .fetch_all(&mut *tx)
    .await
    .map_err(map_err)?;
    let states: HashMap<Uuid, (DeliveryStatus, CommandStatus)> = states
        .into_iter()
        .map(|(id, delivery, command)| {
            Ok((
                id,
                (
                    parse_state(&delivery, DeliveryStatus::parse)?,
                    parse_state(&command, CommandStatus::parse)?,
                ),
            ))
        })
        .collect::<Result<_, StoreError>>()?;
    // A delivery's second report in one batch would have to see its first applied: it runs
    // alone once the batch has answered.
    let mut seen = HashSet::new();
    let decided: Vec<Option<bool>> = jobs
        .iter()
        .map(|t| {
            seen.insert(t.delivery_id).then(|| {
                states
                    .get(&t.delivery_id)
                    .is_some_and(|&(now, command)| rules::report_applies(t.from, now, command))
            })
        })
        .collect();
    let accepted: Vec<&DeliveryTransition> = jobs
        .iter()
        .zip(&decided)
        .filter(|(_, d)| **d == Some(true))
        .map(|(t, _)| t)
        .collect();
    let mut moved: HashMap<Uuid, DeliveryRow> = HashMap::new();
    if !accepted.is_empty() {
        moved = apply_reports(&mut *tx, &accepted).await?;
        write_events(&mut *tx, accepted.iter().map(|t| &t.event)).await?;
    }
    let verdicts = jobs
        .iter()
        .zip(decided)
        .map(|(t, decided)| decided.map(|_| moved.remove(&t.delivery_id)))
        .collect();
    Ok(Ran {
        verdicts,
        workspaces: accepted
            .iter()
            .filter_map(|t| t.event.workspace_id)
            .collect(),
    })
}

/// Moves the accepted deliveries and their commands, in one statement: the deliveries as
/// they now are, by id.
async fn apply_reports(
    conn: &mut PgConnection,
    accepted: &[&DeliveryTransition],
) -> Result<HashMap<Uuid, DeliveryRow>, StoreError> {
    let rows: Vec<DeliveryRow> = sqlx::query_as(
        "WITH x AS (
             SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int4[],
                                  $5::timestamptz[], $6::text[])
                  AS x(id, status, detail, exit_code, at, command_status)
         ), d AS (
             UPDATE webhook_deliveries d SET status = x.status,
                 detail = COALESCE(x.detail, d.detail), exit_code = COALESCE(x.exit_code, d.exit_code),
                 updated_at = x.at, next_attempt_at = NULL
             FROM x WHERE d.id = x.id
             RETURNING d.id, d.command_id, d.status, d.detail, d.exit_code, d.created_at, d.updated_at
         ), c AS (
             UPDATE runner_commands c SET status = x.command_status, updated_at = x.at
             FROM d JOIN x ON x.id = d.id WHERE c.id = d.command_id
         )
         SELECT * FROM d",
    )
    .bind(accepted.iter().map(|t| t.delivery_id).collect::<Vec<Uuid>>())
    .bind(accepted.iter().map(|t| t.to.as_str()).collect::<Vec<&str>>())
    .bind(accepted.iter().map(|t| t.detail.as_deref()).collect::<Vec<Option<&str>>>())
    .bind(accepted.iter().map(|t| t.exit_code).collect::<Vec<Option<i32>>>())
    .bind(accepted.iter().map(|t| t.at).collect::<Vec<DateTime<Utc>>>())
    .bind(
        accepted
            .iter()
            .map(|t| t.to.command_status().as_str())
            .collect::<Vec<&str>>(),
    )
    .fetch_all(conn)
    .await
    .map_err(map_err)?;
    if rows.len() != accepted.len() {
        // Every accepted delivery was locked above: a missing row is a broken invariant, and
        // failing rolls the batch back so each report runs alone.
        return Err(StoreError::Internal(
            "a report batch lost a delivery".into(),
        ));
    }
    Ok(rows.into_iter().map(|r| (r.id, r)).collect())
}
