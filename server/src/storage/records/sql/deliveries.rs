//! Runners' delivery URLs, leasing delivery attempts and recording them (shared by both SQL
//! adapters; see the layout in `storage/mod.rs` and the port's module doc for the lease).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Acquire as _, FromRow};
use uuid::Uuid;

use crate::domain::{CommandStatus, DeliveryStatus};
use crate::storage::records::dialect::{Conn, Dialect};
use crate::storage::records::rows::parse_state;
use crate::storage::{
    AttemptNext, AttemptRecord, AttemptRecorded, AttemptResult, DeliveryReport, DeliveryStore,
    DueDelivery, DueQuery, FAILING_RUNNER_THRESHOLD, Leased, LeasedAttempt, StoreError,
    WriteContext,
};

/// A failed attempt's `runners.failing_since` (`at`: the placeholder of the attempt's end): it
/// starts a run of failures when none was under way, and otherwise stays when that run began.
fn failing_since(at: &str) -> String {
    format!(
        "CASE WHEN consecutive_failures = 0 OR failing_since IS NULL THEN {at} ELSE failing_since END"
    )
}

/// Why an attempt has no answer: the replica sending it stopped before recording one.
const ABANDONED: &str = "abandoned: the replica sending it stopped before recording an answer";

#[derive(FromRow)]
struct DueRow {
    id: Uuid,
    webhook_id: Uuid,
    attempts: i32,
    status: String,
    command_id: Uuid,
    command_status: String,
    workspace_id: Uuid,
    organisation_id: Uuid,
    pool_id: Uuid,
    command: String,
    args: String,
    environment_id: Option<Uuid>,
    timeout_seconds: i32,
    deadline_at: DateTime<Utc>,
}

#[async_trait]
impl<S: Dialect> DeliveryStore for S {
    async fn any_due(&self, now: DateTime<Utc>) -> Result<bool, StoreError> {
        // Ordered, so the plan is the due index's first entry whatever the statistics say:
        // unordered, a table grown faster than its statistics got a sequential scan (9 ms a
        // poll at 50,000 deliveries, most of Postgres's time under runner reports).
        let row: Option<(i32,)> = S::query(
            "SELECT 1 FROM webhook_deliveries
             WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= $1
             ORDER BY next_attempt_at LIMIT 1",
        )
        .bind(now)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.is_some())
    }

    async fn due_deliveries(&self, q: &DueQuery<'_>) -> Result<Vec<DueDelivery>, StoreError> {
        // Placeholders for the skipped ids, after the four fixed parameters.
        let list = |from: usize, n: usize| {
            (from..from + n)
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut skip = String::new();
        if !q.skip_pools.is_empty() {
            skip += &format!(" AND c.pool_id NOT IN ({})", list(5, q.skip_pools.len()));
        }
        if !q.skip_organisations.is_empty() {
            let from = 5 + q.skip_pools.len();
            skip += &format!(
                " AND w.organisation_id NOT IN ({})",
                list(from, q.skip_organisations.len())
            );
        }
        // Every due delivery is ranked (a flood's queue included) so that another
        // organisation's first is never behind it; the held pools are the few whose only
        // receiving runners are held by their breaker.
        let sql = format!(
            "WITH held AS (
                 SELECT DISTINCT r.pool_id FROM runners r
                 WHERE r.held_until > $1 AND r.delivery_url IS NOT NULL
                   AND r.disabled_at IS NULL AND r.removed_at IS NULL
                   AND NOT EXISTS (SELECT 1 FROM runners o
                                   WHERE o.pool_id = r.pool_id AND o.delivery_url IS NOT NULL
                                     AND o.disabled_at IS NULL AND o.removed_at IS NULL
                                     AND (o.held_until IS NULL OR o.held_until <= $1))
             ),
             by_pool AS (
                 SELECT d.id, w.organisation_id, c.pool_id, d.next_attempt_at,
                        row_number() OVER (PARTITION BY c.pool_id
                                           ORDER BY d.next_attempt_at, d.id) AS pool_turn
                 FROM webhook_deliveries d
                 JOIN runner_commands c ON c.id = d.command_id
                 JOIN workspaces w ON w.id = c.workspace_id
                 WHERE d.next_attempt_at IS NOT NULL AND d.next_attempt_at <= $1
                   AND c.pool_id NOT IN (SELECT pool_id FROM held){skip}
             ),
             by_organisation AS (
                 SELECT id, organisation_id, pool_id, next_attempt_at,
                        row_number() OVER (PARTITION BY organisation_id
                                           ORDER BY pool_turn, next_attempt_at, id) AS turn
                 FROM by_pool WHERE pool_turn <= $2
             )
             SELECT id, organisation_id, pool_id FROM by_organisation
             WHERE turn <= $3 ORDER BY turn, next_attempt_at, id LIMIT $4"
        );
        let mut query = S::query(sqlx::AssertSqlSafe(sql))
            .bind(q.now)
            .bind(i64::from(q.per_pool))
            .bind(i64::from(q.per_organisation))
            .bind(i64::from(q.limit));
        for id in q.skip_pools.iter().chain(q.skip_organisations) {
            query = query.bind(*id);
        }
        let rows = query.fetch_all(self.pool()).await?;
        Ok(rows
            .into_iter()
            .map(|(delivery_id, organisation_id, pool_id)| DueDelivery {
                delivery_id,
                organisation_id,
                pool_id,
            })
            .collect())
    }

    async fn lease_attempts(
        &self,
        write: &WriteContext,
        now: DateTime<Utc>,
        deliveries: &[Uuid],
        lease_until: DateTime<Utc>,
    ) -> Result<Leased, StoreError> {
        if deliveries.is_empty() {
            return Ok(Leased::default());
        }
        let ids = (0..deliveries.len())
            .map(|i| format!("${}", i + 2))
            .collect::<Vec<_>>()
            .join(", ");
        let mut tx = self.begin(write).await?;
        // Still due: another replica may have leased some since they were read. Rows another
        // replica is leasing are skipped, not waited for (Postgres); on SQLite this
        // transaction holds the write lock.
        let mut query = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT d.id, COALESCE(d.webhook_id, d.id) AS webhook_id, d.attempts, d.status, c.id AS command_id, c.status AS command_status,
                    c.workspace_id, w.organisation_id, c.pool_id, c.command,
                    CAST(c.args AS TEXT) AS args, c.environment_id, c.timeout_seconds,
                    c.deadline_at
             FROM webhook_deliveries d
             JOIN runner_commands c ON c.id = d.command_id
             JOIN workspaces w ON w.id = c.workspace_id
             WHERE d.next_attempt_at IS NOT NULL AND d.next_attempt_at <= $1
               AND d.id IN ({ids})
             ORDER BY d.next_attempt_at, d.id {lease_lock}",
            lease_lock = S::LEASE_LOCK
        )))
        .bind(now);
        for id in deliveries {
            query = query.bind(*id);
        }
        let due: Vec<DueRow> = query.fetch_all(&mut *tx).await?;
        let mut leased = Leased::default();
        let mut candidates: HashMap<Uuid, (Receivers, usize)> = HashMap::new();
        let mut chosen: Vec<(Uuid, bool)> = Vec::new();
        for row in due {
            let command_status = parse_state(&row.command_status, CommandStatus::parse)?;
            let status = parse_state(&row.status, DeliveryStatus::parse)?;
            if status != DeliveryStatus::Pending || !command_status.is_open() {
                S::query("UPDATE webhook_deliveries SET next_attempt_at = NULL WHERE id = $1")
                    .bind(row.id)
                    .execute(&mut *tx)
                    .await?;
                continue;
            }
            let (receivers, turn) = match candidates.entry(row.pool_id) {
                Entry::Occupied(found) => found.into_mut(),
                Entry::Vacant(slot) => {
                    // Shares the pool with other leases; a runner gaining a URL or a key locks
                    // it (`sql/runners.rs`), so a delivery is never left waiting for a runner
                    // that became able to receive while this lease looked.
                    S::query(sqlx::AssertSqlSafe(format!(
                        "SELECT id FROM runner_pools WHERE id = $1 {for_share}",
                        for_share = S::FOR_SHARE
                    )))
                    .bind(row.pool_id)
                    .execute(&mut *tx)
                    .await?;
                    slot.insert((pool_candidates::<S>(&mut tx, row.pool_id, now).await?, 0))
                }
            };
            let (runner_id, url, probe) = match receivers {
                Receivers::None => {
                    S::query(
                        "UPDATE webhook_deliveries SET next_attempt_at = NULL,
                             waiting_for_runner = $2
                         WHERE id = $1",
                    )
                    .bind(row.id)
                    .bind(true)
                    .execute(&mut *tx)
                    .await?;
                    leased.waiting += 1;
                    continue;
                }
                // Left due, unleased: it goes when the breaker lets its runner take one.
                Receivers::Held => continue,
                Receivers::Probe(runner_id, url) => {
                    let probe = (*runner_id, std::mem::take(url), true);
                    *receivers = Receivers::Held;
                    probe
                }
                // Taking turns within this batch; across batches, by when each was last chosen.
                Receivers::Runners(runners) => {
                    let (runner_id, url) = runners[*turn % runners.len()].clone();
                    *turn += 1;
                    (runner_id, url, false)
                }
            };
            chosen.push((runner_id, probe));
            let number = row.attempts + 1;
            // Only a delivery attempted before can have an attempt left unfinished.
            if row.attempts > 0 {
                S::query(
                    "UPDATE webhook_attempts SET error = $2
                     WHERE delivery_id = $1 AND finished_at IS NULL AND error IS NULL",
                )
                .bind(row.id)
                .bind(ABANDONED)
                .execute(&mut *tx)
                .await?;
            }
            S::query(
                "INSERT INTO webhook_attempts (delivery_id, number, runner_id, url, started_at)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(row.id)
            .bind(number)
            .bind(runner_id)
            .bind(&url)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            S::query(
                "UPDATE webhook_deliveries SET attempts = $2, next_attempt_at = $3 WHERE id = $1",
            )
            .bind(row.id)
            .bind(number)
            .bind(lease_until)
            .execute(&mut *tx)
            .await?;
            let args: Vec<String> = serde_json::from_str(&row.args).map_err(|e| {
                StoreError::Internal(format!("stored arguments are not a JSON list: {e}"))
            })?;
            leased.attempts.push(LeasedAttempt {
                delivery_id: row.id,
                webhook_id: row.webhook_id,
                command_id: row.command_id,
                workspace_id: row.workspace_id,
                organisation_id: row.organisation_id,
                pool_id: row.pool_id,
                number,
                runner_id,
                url,
                command: row.command,
                args,
                environment_id: row.environment_id,
                timeout_seconds: row.timeout_seconds,
                deadline_at: row.deadline_at,
                started_at: now,
                command_status,
            });
        }
        // In one order, so two replicas' leases never wait on each other's runner rows in a
        // cycle. A probe holds its runner until its lease ends, so no other lease sends it a
        // second attempt meanwhile (two replicas reading the same ended cool-down at once may
        // each send one).
        chosen.sort_unstable();
        chosen.dedup();
        for (runner_id, probe) in chosen {
            let update = if probe {
                S::query("UPDATE runners SET last_chosen_at = $2, held_until = $3 WHERE id = $1")
                    .bind(runner_id)
                    .bind(now)
                    .bind(lease_until)
            } else {
                S::query("UPDATE runners SET last_chosen_at = $2 WHERE id = $1")
                    .bind(runner_id)
                    .bind(now)
            };
            update.execute(&mut *tx).await?;
        }
        self.commit(tx, write).await?;
        Ok(leased)
    }

    async fn finish_attempt(
        &self,
        write: &WriteContext,
        r: &AttemptResult,
    ) -> Result<AttemptRecorded, StoreError> {
        let mut tx = self.begin(write).await?;
        S::query(
            "UPDATE webhook_attempts SET finished_at = $3, status_code = $4, latency_ms = $5,
                 error = $6
             WHERE delivery_id = $1 AND number = $2",
        )
        .bind(r.delivery_id)
        .bind(r.number)
        .bind(r.finished_at)
        .bind(r.status_code)
        .bind(r.latency_ms)
        .bind(&r.error)
        .execute(&mut *tx)
        .await?;
        // Only while the delivery is still on this attempt (no later lease) and `pending`.
        let on_lease = "id = $1 AND attempts = $2 AND status = 'pending'";
        let applied = match &r.next {
            // A 2xx from a runner removed meanwhile delivers nothing: it can no longer report.
            AttemptNext::Delivered => {
                S::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE webhook_deliveries SET next_attempt_at = NULL WHERE {on_lease}
                       AND NOT EXISTS (SELECT 1 FROM runners
                                       WHERE id = $3 AND removed_at IS NOT NULL)"
                )))
                .bind(r.delivery_id)
                .bind(r.number)
                .bind(r.runner_id)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    > 0
            }
            AttemptNext::RetryAt(at) => {
                S::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE webhook_deliveries SET next_attempt_at = $3 WHERE {on_lease}"
                )))
                .bind(r.delivery_id)
                .bind(r.number)
                .bind(at)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    > 0
            }
            AttemptNext::GiveUp {
                command_id,
                command_from,
                delivery_from,
                detail,
                event,
            } => {
                // The delivery first, then the command, as a report moves them (one lock order);
                // both or neither, so a savepoint takes the delivery's move back if the command
                // moved meanwhile (a cancellation).
                let mut both = (&mut tx.tx).begin().await.map_err(S::map_err)?;
                let delivery = S::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE webhook_deliveries SET status = $3, detail = $4, updated_at = $5,
                         next_attempt_at = NULL
                     WHERE {on_lease} AND status = $6"
                )))
                .bind(r.delivery_id)
                .bind(r.number)
                .bind(DeliveryStatus::Failed.as_str())
                .bind(detail)
                .bind(r.finished_at)
                .bind(delivery_from.as_str())
                .execute(&mut *both)
                .await?
                .rows_affected();
                let command = if delivery > 0 {
                    S::query(
                        "UPDATE runner_commands SET status = $3, updated_at = $4
                         WHERE id = $1 AND status = $2",
                    )
                    .bind(command_id)
                    .bind(command_from.as_str())
                    .bind(CommandStatus::Failed.as_str())
                    .bind(r.finished_at)
                    .execute(&mut *both)
                    .await?
                    .rows_affected()
                } else {
                    0
                };
                if command > 0 {
                    both.commit().await.map_err(S::map_err)?;
                    // After the savepoint, in the transaction, which notes it for its commit.
                    S::insert_event(&mut tx, event.as_ref()).await?;
                    true
                } else {
                    both.rollback().await.map_err(S::map_err)?;
                    false
                }
            }
        };
        // The runner's health and breaker follow what it answered, whatever became of the
        // delivery. A healthy runner's row is left alone: rewriting it on every success queued
        // each finish on that row behind the others (and behind the lease's `last_chosen_at`).
        let update = if r.breaker.slow {
            // `$4` is read either way: every bound value must be used (Postgres).
            let (failures, since) = if r.error.is_none() {
                (
                    "0",
                    "CASE WHEN $4 IS NULL THEN failing_since END".to_owned(),
                )
            } else {
                ("consecutive_failures + 1", failing_since("$4"))
            };
            S::query(sqlx::AssertSqlSafe(format!(
                "UPDATE runners SET consecutive_failures = {failures}, failing_since = {since},
                     slow_streak = slow_streak + 1,
                     held_until = CASE WHEN $2 > 0 AND slow_streak + 1 >= $2 THEN $3
                                       ELSE held_until END
                 WHERE id = $1"
            )))
            .bind(r.runner_id)
            .bind(r.breaker.trip_after)
            .bind(r.breaker.hold_until)
            .bind(r.finished_at)
        } else if r.error.is_none() {
            S::query(
                "UPDATE runners SET consecutive_failures = 0, slow_streak = 0, held_until = NULL
                 WHERE id = $1
                   AND (consecutive_failures <> 0 OR slow_streak <> 0 OR held_until IS NOT NULL)",
            )
            .bind(r.runner_id)
        } else {
            S::query(sqlx::AssertSqlSafe(format!(
                "UPDATE runners SET consecutive_failures = consecutive_failures + 1,
                     failing_since = {since}, slow_streak = 0, held_until = NULL
                 WHERE id = $1",
                since = failing_since("$2")
            )))
            .bind(r.runner_id)
            .bind(r.finished_at)
        };
        update.execute(&mut *tx).await?;
        self.commit(tx, write).await?;
        Ok(if applied {
            AttemptRecorded::Applied
        } else {
            AttemptRecorded::Superseded
        })
    }

    async fn delivery_report(
        &self,
        delivery_id: Uuid,
    ) -> Result<Option<DeliveryReport>, StoreError> {
        #[derive(FromRow)]
        struct Row {
            id: Uuid,
            command_id: Uuid,
            workspace_id: Uuid,
            pool_id: Uuid,
            status: String,
            command_status: String,
            detail: Option<String>,
            next_attempt_at: Option<DateTime<Utc>>,
        }
        #[derive(FromRow)]
        struct AttemptRow {
            number: i32,
            runner_id: Uuid,
            url: String,
            started_at: DateTime<Utc>,
            finished_at: Option<DateTime<Utc>>,
            status_code: Option<i32>,
            latency_ms: Option<i32>,
            error: Option<String>,
        }
        // One snapshot for both statements: what one transaction writes to an attempt and
        // its delivery (a lease, `finish_attempt`) shows together. Two snapshots showed a
        // delivery given up beside its last attempt still in flight, and, in the other order,
        // a finished 202 beside the lease's `next_attempt_at`. A delivery a timeout or a
        // runner's report ended may still sit beside an unfinished attempt: that is its state.
        let mut tx = self.begin_snapshot().await?;
        let attempts: Vec<AttemptRow> = S::query(
            "SELECT number, runner_id, url, started_at, finished_at, status_code, latency_ms, error
             FROM webhook_attempts WHERE delivery_id = $1 ORDER BY number",
        )
        .bind(delivery_id)
        .fetch_all(&mut *tx)
        .await?;
        let row: Option<Row> = S::query(
            "SELECT d.id, d.command_id, c.workspace_id, c.pool_id, d.status,
                    c.status AS command_status, d.detail, d.next_attempt_at
             FROM webhook_deliveries d JOIN runner_commands c ON c.id = d.command_id
             WHERE d.id = $1",
        )
        .bind(delivery_id)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await.map_err(S::map_err)?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(DeliveryReport {
            delivery_id: row.id,
            command_id: row.command_id,
            workspace_id: row.workspace_id,
            pool_id: row.pool_id,
            status: parse_state(&row.status, DeliveryStatus::parse)?,
            command_status: parse_state(&row.command_status, CommandStatus::parse)?,
            detail: row.detail,
            next_attempt_at: row.next_attempt_at,
            attempts: attempts
                .into_iter()
                .map(|a| AttemptRecord {
                    number: a.number,
                    runner_id: a.runner_id,
                    url: a.url,
                    started_at: a.started_at,
                    finished_at: a.finished_at,
                    status_code: a.status_code,
                    latency_ms: a.latency_ms,
                    error: a.error,
                })
                .collect(),
        }))
    }
}

/// Where a pool's deliveries may go in one lease.
enum Receivers {
    /// No runner with a delivery URL and a live key: deliveries wait for one.
    None,
    /// Every such runner is held by its breaker (or took this lease's one probe).
    Held,
    /// Only runners whose breaker's cool-down ended: the first takes one attempt.
    Probe(Uuid, String),
    /// Runners with a closed breaker, taking turns.
    Runners(Vec<(Uuid, String)>),
}

/// The runners of a pool a delivery may go to: those with a delivery URL and a live key; of
/// them, those whose breaker is closed, and of these the ones failing less than
/// [`FAILING_RUNNER_THRESHOLD`] times in a row when there are any (a failing runner is skipped
/// while a healthy one exists); least recently chosen first. With no closed breaker, the
/// least recently chosen runner whose cool-down ended is probed.
async fn pool_candidates<S: Dialect>(
    conn: &mut Conn<S>,
    pool_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Receivers, StoreError> {
    type Row = (Uuid, String, i32, Option<DateTime<Utc>>);
    let runners: Vec<Row> = S::query(
        "SELECT r.id, r.delivery_url, r.consecutive_failures, r.held_until FROM runners r
         WHERE r.pool_id = $1 AND r.delivery_url IS NOT NULL
           AND r.disabled_at IS NULL AND r.removed_at IS NULL
           AND EXISTS (SELECT 1 FROM runner_keys k
                       WHERE k.runner_id = r.id AND k.revoked_at IS NULL)
         ORDER BY r.last_chosen_at NULLS FIRST, r.id",
    )
    .bind(pool_id)
    .fetch_all(&mut *conn)
    .await?;
    if runners.is_empty() {
        return Ok(Receivers::None);
    }
    let (closed, rest): (Vec<Row>, Vec<Row>) = runners
        .into_iter()
        .partition(|(_, _, _, held)| held.is_none());
    if closed.is_empty() {
        return Ok(rest
            .into_iter()
            .find(|(_, _, _, held)| held.is_some_and(|until| until <= now))
            .map_or(Receivers::Held, |(id, url, _, _)| Receivers::Probe(id, url)));
    }
    let healthy = closed
        .iter()
        .any(|(_, _, failures, _)| *failures < FAILING_RUNNER_THRESHOLD);
    Ok(Receivers::Runners(
        closed
            .into_iter()
            .filter(|(_, _, failures, _)| !healthy || *failures < FAILING_RUNNER_THRESHOLD)
            .map(|(id, url, _, _)| (id, url))
            .collect(),
    ))
}
