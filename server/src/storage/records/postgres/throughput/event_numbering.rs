//! Numbering audit events after commit (issue #17).
//!
//! A workspace's events carry a gap-free sequence: the activity cursor and the stream's
//! `Last-Event-ID` resume from it. Numbering an event inside its writer's transaction meant
//! taking the workspace's counter row lock and holding it through that transaction's commit,
//! WAL flush included, so writes into one workspace ran one fsync at a time. Now a writer
//! inserts its events unnumbered and commits without any shared lock (concurrent commits share
//! WAL flushes, which Postgres groups on its own), then asks the [`Sequencer`] to number them.
//!
//! A sequencing pass is one short transaction: under the advisory lock of one partition of
//! the workspaces (one pass per partition at a time across every replica), it numbers every
//! committed event of that partition still unnumbered, per workspace in the order they were
//! appended, and bumps each workspace's counter by the count; after its commit, the new heads
//! are announced on `cp_audit`, many to a notification (see [`announce`]). Events committed
//! together are ordered by when they were appended; an event committed after a pass read gets
//! a higher number in a later pass. No reader ever saw an unnumbered event, so this is a valid
//! commit order with no gap and no repeat, on every replica.
//!
//! Passes coalesce per partition: a writer waits for a pass of its workspace's partition that
//! started after its commit; while one runs, the writers that committed meanwhile queue and the
//! first of them runs the next pass for all. Many writes share one sequencing commit, which is
//! the group commit the issue asks for, and the writer's own commit never waits on another's.
//! The writer answers only once its events are numbered, so a client reads its own write in
//! the activity log as before. A process that dies between its commit and a pass leaves events
//! unnumbered: the audit feed's sweep (every second, on every replica) finds their partitions
//! and runs their passes.
//!
//! Why partitions: under one lock for the whole database, three servers writing into 1,000
//! workspaces together numbered fewer events than one server alone, with a fifth of the busy
//! backends waiting on that lock (BENCHMARKS.md, "audit numbering at 1,000 workspaces").

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Mutex;
use uuid::Uuid;

use super::super::map_err;
use crate::domain::{GENESIS_HASH, chain_hash};
use crate::storage::StoreError;
use crate::storage::records::sql::audit::{EVENT_COLUMNS, EventRow};

/// The advisory lock key of the whole log ("cp audit"). A pass holds it shared and its
/// partition's key (this plus one plus the partition) exclusive; a server from before the
/// partitions held it exclusive, so a rolling upgrade never runs an old and a new pass on the
/// same workspace at once.
const SEQUENCER_LOCK: i64 = 0x6370_5f61_7564_6974;

/// Partitions of the workspaces, each numbered under a lock of its own. A power of two, and
/// fixed: every replica must map a workspace to the same lock.
pub const NUMBERING_PARTITIONS: usize = 16;

/// The partition of a workspace: the low bits of its id's last byte, random in v4 and v7 ids.
/// [`PARTITION_SQL`] is the same function in SQL.
pub fn numbering_partition(workspace: Uuid) -> usize {
    usize::from(workspace.as_bytes()[15]) & (NUMBERING_PARTITIONS - 1)
}

/// [`numbering_partition`] of `audit_events.workspace_id`, in SQL.
const PARTITION_SQL: &str = "(get_byte(uuid_send(workspace_id), 15) & 15)";

/// Heads announced in one notification: each is at most 57 bytes (`<uuid> <i64>,`), and a
/// NOTIFY payload must stay under 8,000.
const HEADS_PER_NOTIFY: usize = 100;

/// Events one read of a pass takes: a few milliseconds of hashing and one round trip of arrays.
const PASS_BATCH: i64 = 5_000;

/// Numbers the events of every committed transaction, one pass per partition at a time (see
/// the module doc).
#[derive(Debug)]
pub(crate) struct Sequencer {
    partitions: [Partition; NUMBERING_PARTITIONS],
    /// How long one step of a pass may take (see [`number_pending`]).
    deadline: Duration,
}

#[derive(Debug, Default)]
struct Partition {
    /// Tickets handed to writers that committed events; a pass covers every ticket issued
    /// before it started.
    issued: AtomicU64,
    /// The highest ticket a finished pass covers.
    covered: AtomicU64,
    /// Held by the writer running a pass; the others queue on it in order.
    running: Mutex<()>,
}

impl Sequencer {
    pub(crate) fn new(deadline: Duration) -> Self {
        Self {
            partitions: Default::default(),
            deadline,
        }
    }

    /// Returns once a pass that started after this call has numbered every committed event of
    /// `workspaces`' partitions.
    pub(in super::super) async fn settle(
        &self,
        pool: &PgPool,
        workspaces: &[Uuid],
    ) -> Result<(), StoreError> {
        let partitions = workspaces
            .iter()
            .copied()
            .map(numbering_partition)
            .collect();
        self.settle_partitions(pool, partitions).await
    }

    /// Numbers every committed event still waiting, in whichever partition: events whose
    /// writer died before its pass.
    pub(in super::super) async fn sweep(&self, pool: &PgPool) -> Result<(), StoreError> {
        let partitions = waiting_partitions(pool).await?;
        self.settle_partitions(pool, partitions).await
    }

    async fn settle_partitions(
        &self,
        pool: &PgPool,
        mut partitions: Vec<usize>,
    ) -> Result<(), StoreError> {
        partitions.sort_unstable();
        partitions.dedup();
        // One after the other: a writer's events are nearly always in one workspace.
        for p in partitions {
            self.settle_partition(pool, p).await?;
        }
        Ok(())
    }

    async fn settle_partition(&self, pool: &PgPool, p: usize) -> Result<(), StoreError> {
        let partition = &self.partitions[p];
        let ticket = partition.issued.fetch_add(1, Ordering::SeqCst) + 1;
        loop {
            if partition.covered.load(Ordering::SeqCst) >= ticket {
                return Ok(());
            }
            let running = partition.running.lock().await;
            if partition.covered.load(Ordering::SeqCst) >= ticket {
                return Ok(());
            }
            let target = partition.issued.load(Ordering::SeqCst);
            let moved = number_pending(pool, p, self.deadline).await?;
            partition.covered.fetch_max(target, Ordering::SeqCst);
            // Outside the partition's turn: the next pass need not wait for the announcement.
            drop(running);
            announce(pool, &moved).await;
        }
    }
}

/// The partitions that hold committed, unnumbered events: what the sweep numbers.
async fn waiting_partitions(pool: &PgPool) -> Result<Vec<usize>, StoreError> {
    let found: Vec<i32> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT DISTINCT {PARTITION_SQL} FROM audit_events
         WHERE seq IS NULL AND workspace_id IS NOT NULL"
    )))
    .fetch_all(pool)
    .await
    .map_err(map_err)?;
    Ok(found.into_iter().map(|p| p as usize).collect())
}

/// One pass over partition `p`: numbers every committed, unnumbered event of it and links each
/// into its workspace's hash chain (`domain/audit_chain.rs`); returns each moved head, for
/// [`announce`].
///
/// The chain is why a pass reads the waiting events whole (the old pass numbered them in one
/// statement without reading them): the hash covers every field, so it is computed here, in
/// Rust, under the pass's lock. A pass is three statements (the events, the heads, one write)
/// and one SHA-256 per event.
///
/// Each step (the locks, a batch, the commit) must finish within `deadline`: past it the pass
/// waits on a connection that stopped answering, and holding its partition's turn would stall
/// every writer of the partition behind it. A deadline on the whole pass instead would stop a
/// backlog that takes longer than that for good; a step is bounded work.
async fn number_pending(
    pool: &PgPool,
    p: usize,
    deadline: Duration,
) -> Result<HashMap<Uuid, i64>, StoreError> {
    let mut tx = pool.begin().await.map_err(map_err)?;
    // A plain index scan of the waiting events, never a bitmap scan: each pass leaves its
    // events' old versions in the partial index until vacuum, and only a plain index scan
    // marks such entries dead for the scans after it. A bitmap scan visited them all again on
    // every pass (55,000 entries, 8 ms a pass, a third of Postgres's time in BENCHMARKS.md).
    let locks = sqlx::query(
        "SELECT pg_advisory_xact_lock_shared($1), pg_advisory_xact_lock($1 + 1 + $2),
                set_config('enable_bitmapscan', 'off', true)",
    )
    .bind(SEQUENCER_LOCK)
    .bind(p as i64)
    .execute(&mut *tx);
    step(deadline, async { locks.await.map_err(map_err) }).await?;
    // Batches of `PASS_BATCH`, in one transaction: a backlog (a replica that was down, a
    // burst) is numbered in bounded reads instead of one read of every waiting event, and the
    // heads each batch writes are what the next batch reads.
    let mut moved = HashMap::new();
    while step(deadline, number_batch(&mut tx, p, &mut moved)).await? == PASS_BATCH {}
    step(deadline, async { tx.commit().await.map_err(map_err) }).await?;
    Ok(moved)
}

/// `work` within `deadline`, or unavailable (see [`number_pending`]).
async fn step<T>(
    deadline: Duration,
    work: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(deadline, work).await.map_err(|_| {
        StoreError::Unavailable("a step of a numbering pass ran past its deadline".into())
    })?
}

/// Announces the moved heads on `cp_audit`, `<workspace> <sequence>` joined by `,`, in as few
/// notifications as the payload limit allows, after the pass's commit and in a transaction of
/// their own that does not wait for its WAL flush.
///
/// Why not in the pass: Postgres queues a transaction's notifications under one lock for the
/// whole instance, held until its commit is flushed (`PreCommit_Notify` in `async.c`), so
/// passes of different partitions that NOTIFY would commit one at a time again. An
/// announcement is a hint (the audit feed polls each second), so one lost to a crash between
/// the two commits costs a second of latency, not an event.
async fn announce(pool: &PgPool, moved: &HashMap<Uuid, i64>) {
    let heads: Vec<String> = moved
        .iter()
        .map(|(ws, seq)| format!("{ws} {seq}"))
        .collect();
    for chunk in heads.chunks(HEADS_PER_NOTIFY) {
        let sent = async {
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)")
                .bind(super::super::AUDIT_CHANNEL)
                .bind(chunk.join(","))
                .execute(&mut *tx)
                .await?;
            tx.commit().await
        };
        if let Err(e) = sent.await {
            tracing::debug!(error = %e, "could not announce numbered audit events; listeners poll");
            return;
        }
    }
}

/// Numbers up to [`PASS_BATCH`] waiting events of partition `p` in `tx`, noting each moved
/// head in `moved`; returns how many it numbered.
async fn number_batch(
    tx: &mut sqlx::PgConnection,
    p: usize,
    moved: &mut HashMap<Uuid, i64>,
) -> Result<i64, StoreError> {
    // Read after the lock: a pass that waited sees what the previous one numbered.
    let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {EVENT_COLUMNS} FROM audit_events
         WHERE seq IS NULL AND workspace_id IS NOT NULL AND {PARTITION_SQL} = $1
         ORDER BY appended, id
         LIMIT {PASS_BATCH}"
    )))
    .bind(p as i32)
    .fetch_all(&mut *tx)
    .await
    .map_err(map_err)?;
    let waiting: Vec<_> = rows.into_iter().map(EventRow::into_event).collect();
    if waiting.is_empty() {
        return Ok(0);
    }
    let mut workspaces: Vec<Uuid> = waiting.iter().filter_map(|e| e.workspace_id).collect();
    workspaces.sort_unstable();
    workspaces.dedup();
    let rows: Vec<(Uuid, i64, Option<Vec<u8>>)> =
        sqlx::query_as("SELECT id, audit_seq, audit_hash FROM workspaces WHERE id = ANY($1)")
            .bind(&workspaces)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
    let mut heads: HashMap<Uuid, (i64, Vec<u8>)> = rows
        .into_iter()
        .map(|(id, seq, hash)| (id, (seq, hash.unwrap_or_else(|| GENESIS_HASH.to_vec()))))
        .collect();
    let (mut ids, mut seqs, mut hashes) = (Vec::new(), Vec::new(), Vec::new());
    for mut event in waiting {
        let Some(head) = event.workspace_id.and_then(|w| heads.get_mut(&w)) else {
            continue;
        };
        let seq = head.0 + 1;
        event.sequence = Some(seq);
        let hash = chain_hash(&head.1, &event).map_err(|e| StoreError::Internal(e.to_string()))?;
        *head = (seq, hash.to_vec());
        ids.push(event.id);
        seqs.push(seq);
        hashes.push(hash.to_vec());
    }
    let (mut head_ids, mut head_seqs, mut head_hashes) = (Vec::new(), Vec::new(), Vec::new());
    for (id, (seq, hash)) in heads {
        head_ids.push(id);
        head_seqs.push(seq);
        head_hashes.push(hash);
    }
    sqlx::query(
        "WITH numbered AS (
             UPDATE audit_events e SET seq = u.seq, hash = u.hash
             FROM unnest($1::uuid[], $2::bigint[], $3::bytea[]) AS u(id, seq, hash)
             WHERE e.id = u.id
         )
         UPDATE workspaces w SET audit_seq = h.seq, audit_hash = h.hash
         FROM unnest($4::uuid[], $5::bigint[], $6::bytea[]) AS h(id, seq, hash)
         WHERE w.id = h.id AND w.audit_seq < h.seq",
    )
    .bind(&ids)
    .bind(&seqs)
    .bind(&hashes)
    .bind(&head_ids)
    .bind(&head_seqs)
    .bind(&head_hashes)
    .execute(&mut *tx)
    .await
    .map_err(map_err)?;
    moved.extend(head_ids.into_iter().zip(head_seqs));
    Ok(ids.len() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sql_partition_masks_the_same_bits() {
        assert!(NUMBERING_PARTITIONS.is_power_of_two());
        let mask = format!("& {})", NUMBERING_PARTITIONS - 1);
        assert!(PARTITION_SQL.ends_with(&mask), "{PARTITION_SQL}");
        let id = Uuid::from_u128(0xffff_0000_0000_0000_0000_0000_0000_00a7);
        assert_eq!(numbering_partition(id), 0x7);
    }
}
