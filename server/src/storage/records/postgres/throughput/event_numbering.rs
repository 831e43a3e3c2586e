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

use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::PgPool;
use tokio::sync::Mutex;

use super::super::map_err;
use crate::storage::StoreError;

/// The advisory lock key that orders sequencing passes across replicas ("cp audit").
const SEQUENCER_LOCK: i64 = 0x6370_5f61_7564_6974;

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

/// One pass: numbers every committed, unnumbered event and announces each workspace's head;
/// returns how many workspaces gained events.
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
    // Read after the lock: a pass that waited sees what the previous one numbered.
    let workspaces = sqlx::query(
        "WITH pending AS (
             SELECT id, workspace_id,
                    row_number() OVER (PARTITION BY workspace_id ORDER BY appended, id) AS rn
             FROM audit_events WHERE seq IS NULL AND workspace_id IS NOT NULL
         ), counts AS (
             SELECT workspace_id, count(*) AS n FROM pending GROUP BY workspace_id
         ), bumped AS (
             UPDATE workspaces w SET audit_seq = w.audit_seq + c.n
             FROM counts c WHERE w.id = c.workspace_id
             RETURNING w.id, w.audit_seq - c.n AS base, w.audit_seq AS head
         ), numbered AS (
             UPDATE audit_events e SET seq = b.base + p.rn
             FROM pending p JOIN bumped b ON b.id = p.workspace_id
             WHERE e.id = p.id
         )
         SELECT pg_notify('cp_audit', b.id::text || ' ' || b.head::text) FROM bumped b",
    )
    .execute(&mut *tx)
    .await
    .map_err(map_err)?
    .rows_affected();
    tx.commit().await.map_err(map_err)?;
    Ok(workspaces)
}
