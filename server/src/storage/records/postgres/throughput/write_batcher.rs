//! Concurrent writes of one kind, gathered into shared transactions.
//!
//! A write alone is a transaction of five or six round trips (BEGIN, its statements, COMMIT),
//! and under load their per-statement cost, not the data written, is most of what Postgres and
//! the server spend (BENCHMARKS.md, issue 17). A kind of write that can be applied set-based
//! (issuances in `tokens.rs`, delivery reports in `runners.rs`) queues its writes here: one
//! task per kind and store gathers those waiting into one transaction of a few statements,
//! whatever their number. Each kind reads what its rules need for every write under row locks
//! taken in id order, applies the rules (`domain::rules`) in queue order, each write seeing
//! the ones accepted before it, and writes the accepted ones in one statement per table, so
//! the outcome is the one the writes would have had one after another.
//!
//! A batch that fails as a whole (a deadlock, a lost connection) rolls back and each of its
//! writes runs again alone, so one write's failure stays its own; a kind may also send a write
//! alone when a batch cannot decide it (two reports of one delivery). A batch still running
//! at its deadline (its connection went silent) is dropped so the lane goes on, and its writes
//! answer 503 without running again: their COMMIT may have landed. A write whose caller
//! stopped waiting is skipped before its batch starts. A request with an
//! `Idempotency-Key` always runs alone: its transaction is held open for its outcome
//! (`storage/write_context.rs`).
//!
//! Each kind has [`LANES`] lanes, and a write goes to the lane of its key (an issuance's owner,
//! a report's delivery). A lane runs one batch at a time; while it does, new writes queue,
//! which is what makes batches grow with the load and stay at one write when there is none.
//! Two lanes overlap one batch's commit with the other's statements, and since writes of one
//! key always share a lane, the batches running at once never wait for each other's row locks:
//! with two batches drawn from one queue, one waited out the other's owner locks in most
//! batches (BENCHMARKS.md, issue 17).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::super::{map_err, settle_after_commit};
use super::event_numbering::Sequencer;
use crate::storage::StoreError;
use crate::storage::WriteContext;

/// Lanes of one kind, each running one batch at a time.
const LANES: usize = 2;
/// Writes in one batch at most.
const MAX_BATCH: usize = 64;
/// Writes waiting in one lane at most; a full lane makes the caller wait.
const QUEUE: usize = 1024;

/// A kind of write that runs in batches.
#[async_trait::async_trait]
pub(in super::super) trait Kind: Send + Sync + 'static {
    type Job: Send + Sync + 'static;
    type Verdict: Send + 'static;
    /// Named in the log line of a failed batch.
    const WHAT: &'static str;

    /// The key whose writes share a lane: the one whose row the batch locks for update.
    fn key(job: &Self::Job) -> Uuid;

    /// Applies `jobs` in the batch's transaction (the batcher begins and commits it): one
    /// verdict for each, in order (`None`: it runs alone), and the workspaces it wrote events
    /// into.
    /// `Err` rolls the whole batch back.
    async fn run(
        tx: &mut PgConnection,
        jobs: &[Self::Job],
    ) -> Result<Ran<Self::Verdict>, StoreError>;
}

pub(in super::super) struct Ran<V> {
    pub verdicts: Vec<Option<V>>,
    /// The workspaces the batch wrote events into, whose numbering its writers wait for.
    pub workspaces: Vec<Uuid>,
}

/// The lanes of one kind, whose tasks start with its first write.
pub(in super::super) struct Batcher<K: Kind> {
    lanes: OnceLock<Vec<mpsc::Sender<Queued<K>>>>,
    /// How long a batch may run before its lane gives up on it (see [`run_lane`]).
    deadline: Duration,
}

impl<K: Kind> Batcher<K> {
    pub fn new(deadline: Duration) -> Self {
        Self {
            lanes: OnceLock::new(),
            deadline,
        }
    }
}

struct Queued<K: Kind> {
    job: K::Job,
    answer: oneshot::Sender<Option<K::Verdict>>,
}

impl<K: Kind> Batcher<K> {
    /// Runs `job` in a batch: `None` when it must run alone (see the module doc), as a write
    /// whose transaction `write` holds for an outcome must.
    pub async fn submit(
        &self,
        pool: &PgPool,
        sequencer: &Arc<Sequencer>,
        write: &WriteContext,
        job: K::Job,
    ) -> Option<Result<K::Verdict, StoreError>> {
        if write.holds() {
            return None;
        }
        let lanes = self.lanes.get_or_init(|| {
            (0..LANES)
                .map(|_| {
                    let (lane, waiting) = mpsc::channel(QUEUE);
                    // The task holds the pool and the sequencer, not the store: it ends when
                    // the store's last clone drops the lane.
                    let lane_task =
                        run_lane::<K>(pool.clone(), sequencer.clone(), waiting, self.deadline);
                    tokio::spawn(lane_task);
                    lane
                })
                .collect()
        });
        let lane = &lanes[(K::key(&job).as_u128() % LANES as u128) as usize];
        let (answer, answered) = oneshot::channel();
        lane.send(Queued { job, answer }).await.ok()?;
        match answered.await {
            Ok(verdict) => verdict.map(Ok),
            // The batch was dropped at its deadline, or its task stopped mid-batch (the
            // runtime is shutting down): whether it committed is unknown, so the caller is not
            // told to run the write again.
            Err(_) => Some(Err(StoreError::Unavailable(format!(
                "the {} batch stopped before it answered",
                K::WHAT
            )))),
        }
    }
}

/// One transaction for the batch: all of it commits, or none.
async fn run_batch<K: Kind>(pool: &PgPool, jobs: &[K::Job]) -> Result<Ran<K::Verdict>, StoreError> {
    let mut tx = pool.begin().await.map_err(map_err)?;
    let ran = K::run(&mut tx, jobs).await?;
    tx.commit().await.map_err(map_err)?;
    Ok(ran)
}

/// A batch that has not finished by `deadline` is stuck on a connection that stopped
/// answering (Postgres itself cancels any one statement sooner): the lane drops it and goes on,
/// and its writers are answered 503 with the outcome unknown, never run again alone, since its
/// COMMIT may have landed.
async fn run_lane<K: Kind>(
    pool: PgPool,
    sequencer: Arc<Sequencer>,
    mut waiting: mpsc::Receiver<Queued<K>>,
    deadline: Duration,
) {
    while let Some(first) = waiting.recv().await {
        // Whatever queued while the lane's last batch ran joins this one.
        let mut queued = vec![first];
        while queued.len() < MAX_BATCH {
            let Ok(next) = waiting.try_recv() else { break };
            queued.push(next);
        }
        // A writer stopped while it waited here (its request's deadline) was answered 503: its
        // write must not land behind its back.
        queued.retain(|q| !q.answer.is_closed());
        if queued.is_empty() {
            continue;
        }
        let (jobs, answers): (Vec<K::Job>, Vec<_>) =
            queued.into_iter().map(|q| (q.job, q.answer)).unzip();
        let ran = match tokio::time::timeout(deadline, run_batch::<K>(&pool, &jobs)).await {
            Ok(ran) => ran,
            Err(_) => {
                let writes = jobs.len();
                tracing::error!(
                    writes,
                    "a {} batch ran past its deadline and was dropped; its outcome is unknown",
                    K::WHAT
                );
                // Dropping the answers tells each writer so (see `submit`).
                continue;
            }
        };
        let (verdicts, workspaces) = match ran {
            Ok(ran) => (ran.verdicts, ran.workspaces),
            Err(e) => {
                let writes = jobs.len();
                tracing::info!(error = %e, writes, "a {} batch failed; each runs alone", K::WHAT);
                // No verdicts: each of the batch's writes runs alone.
                (Vec::new(), Vec::new())
            }
        };
        // The batch has committed and released its locks: the lane's next batch starts while
        // this one's events are numbered, which its writers wait for.
        let (sequencer, pool) = (sequencer.clone(), pool.clone());
        tokio::spawn(async move {
            settle_after_commit(&sequencer, &pool, &workspaces).await;
            let mut verdicts = verdicts.into_iter();
            for answer in answers {
                let _ = answer.send(verdicts.next().flatten());
            }
        });
    }
}
