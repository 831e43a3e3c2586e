//! Numbering audit events after commit (issue #17).
//!
//! A workspace's events carry a gap-free sequence: the activity cursor and the stream's
//! `Last-Event-ID` resume from it. Numbering an event inside its writer's transaction meant
//! taking the workspace's counter row lock and holding it through that transaction's commit,
//! WAL flush included, so writes into one workspace ran one fsync at a time. Now a writer
//! inserts its events unnumbered and commits without any shared lock (concurrent commits share
//! WAL flushes, which Postgres groups on its own), then asks the [`Sequencer`] to number them.
//!
//! A sequencing pass is one short transaction: under a transaction-level advisory lock (one pass
//! at a time across every replica), it numbers every committed event still unnumbered, per
//! workspace in the order they were appended, bumps each workspace's counter by the count, and
//! announces the new heads on `cp_audit`. Events committed together are ordered by when they
//! were appended; an event committed after a pass read gets a higher number in a later pass. No
//! reader ever saw an unnumbered event, so this is a valid commit order with no gap and no
//! repeat, on every replica.
//!
//! Passes coalesce: a writer waits for a pass that started after its commit; while one runs,
//! the writers that committed meanwhile queue and the first of them runs the next pass for all.
//! Many writes share one sequencing commit, which is the group commit the issue asks for, and
//! the writer's own commit never waits on another's. The writer answers only once its events
//! are numbered, so a client reads its own write in the activity log as before. A process that
//! dies between its commit and a pass leaves events unnumbered: the next pass of any replica
//! (the audit feed runs one every second) numbers them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::PgPool;
use tokio::sync::Mutex;
use uuid::Uuid;

use super::super::map_err;
use crate::domain::{GENESIS_HASH, chain_hash};
use crate::storage::StoreError;
use crate::storage::records::sql::audit::{EVENT_COLUMNS, EventRow};

/// The advisory lock key that orders sequencing passes across replicas ("cp audit").
const SEQUENCER_LOCK: i64 = 0x6370_5f61_7564_6974;

/// Events one read of a pass takes: a few milliseconds of hashing and one round trip of arrays.
const PASS_BATCH: i64 = 5_000;

/// Numbers the events of every committed transaction, one pass at a time (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Sequencer {
    /// Tickets handed to writers that committed events; a pass covers every ticket issued
    /// before it started.
    issued: AtomicU64,
    /// The highest ticket a finished pass covers.
    covered: AtomicU64,
    /// Held by the writer running a pass; the others queue on it in order.
    running: Mutex<()>,
}

impl Sequencer {
    /// Returns once a pass that started after this call has numbered every committed event.
    pub(in super::super) async fn settle(&self, pool: &PgPool) -> Result<(), StoreError> {
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        loop {
            if self.covered.load(Ordering::SeqCst) >= ticket {
                return Ok(());
            }
            let _running = self.running.lock().await;
            if self.covered.load(Ordering::SeqCst) >= ticket {
                return Ok(());
            }
            let target = self.issued.load(Ordering::SeqCst);
            number_pending(pool).await?;
            self.covered.fetch_max(target, Ordering::SeqCst);
        }
    }
}

/// One pass: numbers every committed, unnumbered event, links it into its workspace's hash
/// chain (`domain/audit_chain.rs`), and announces each workspace's head; returns how many
/// workspaces gained events.
///
/// The chain is why a pass reads the waiting events whole (the old pass numbered them in one
/// statement without reading them): the hash covers every field, so it is computed here, in
/// Rust, under the pass's lock. A pass is three statements (the events, the heads, one write)
/// and one SHA-256 per event.
pub(in super::super) async fn number_pending(pool: &PgPool) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await.map_err(map_err)?;
    // A plain index scan of the waiting events, never a bitmap scan: each pass leaves its
    // events' old versions in the partial index until vacuum, and only a plain index scan
    // marks such entries dead for the scans after it. A bitmap scan visited them all again on
    // every pass (55,000 entries, 8 ms a pass, a third of Postgres's time in BENCHMARKS.md).
    sqlx::query("SELECT pg_advisory_xact_lock($1), set_config('enable_bitmapscan', 'off', true)")
        .bind(SEQUENCER_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
    // Batches of `PASS_BATCH`, in one transaction: a backlog (a replica that was down, a
    // burst) is numbered in bounded reads instead of one read of every waiting event, and the
    // heads each batch writes are what the next batch reads.
    let mut moved = 0;
    loop {
        let (numbered, workspaces) = number_batch(&mut tx).await?;
        moved += workspaces;
        if numbered < PASS_BATCH {
            break;
        }
    }
    tx.commit().await.map_err(map_err)?;
    Ok(moved)
}

/// Numbers up to [`PASS_BATCH`] waiting events in `tx`; returns how many it numbered and how
/// many workspace heads moved.
async fn number_batch(tx: &mut sqlx::PgConnection) -> Result<(i64, u64), StoreError> {
    // Read after the lock: a pass that waited sees what the previous one numbered.
    let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {EVENT_COLUMNS} FROM audit_events
         WHERE seq IS NULL AND workspace_id IS NOT NULL
         ORDER BY appended, id
         LIMIT {PASS_BATCH}"
    )))
    .fetch_all(&mut *tx)
    .await
    .map_err(map_err)?;
    let waiting = rows
        .into_iter()
        .map(EventRow::into_event)
        .collect::<Result<Vec<_>, _>>()?;
    if waiting.is_empty() {
        return Ok((0, 0));
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
    let workspaces = sqlx::query(
        "WITH numbered AS (
             UPDATE audit_events e SET seq = u.seq, hash = u.hash
             FROM unnest($1::uuid[], $2::bigint[], $3::bytea[]) AS u(id, seq, hash)
             WHERE e.id = u.id
         ), bumped AS (
             UPDATE workspaces w SET audit_seq = h.seq, audit_hash = h.hash
             FROM unnest($4::uuid[], $5::bigint[], $6::bytea[]) AS h(id, seq, hash)
             WHERE w.id = h.id AND w.audit_seq < h.seq
             RETURNING w.id, w.audit_seq AS head
         )
         SELECT pg_notify('cp_audit', b.id::text || ' ' || b.head::text) FROM bumped b",
    )
    .bind(&ids)
    .bind(&seqs)
    .bind(&hashes)
    .bind(&head_ids)
    .bind(&head_seqs)
    .bind(&head_hashes)
    .execute(&mut *tx)
    .await
    .map_err(map_err)?
    .rows_affected();
    Ok((ids.len() as i64, workspaces))
}
