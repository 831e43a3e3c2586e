//! The server's background tasks, each a loop on a timer: following policy changes, purging
//! expired idempotency outcomes, failing overdue runner commands, and giving tokens near their
//! expiry their notice. Each holds no rule of its own; the service or the store decides what a
//! tick does.

use std::sync::Arc;
use std::time::Duration;

use crate::domain::Span;
use crate::service::{BackgroundTask, Services};
use crate::storage::{OutcomeStore, Topic};

/// Keeps this process's policies in step with the store: reloads on every announcement, and
/// polls regardless (an announcement can be lost while the listener reconnects). A store that
/// does not announce other processes' changes (SQLite, or Postgres when LISTEN failed) is polled
/// four times a second to stay within a second of `cpctl`.
pub(super) fn watch_policies(services: Arc<Services>) {
    tokio::spawn(async move {
        let mut changes = services.store().changes(Topic::Policies).await;
        let poll = if changes.announces_every_process() {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(250)
        };
        let mut generation = None;
        loop {
            tokio::select! {
                _ = changes.next() => {}
                () = tokio::time::sleep(poll) => {}
            }
            match services.store().policy_state().await {
                Ok(state) if Some(state.generation) == generation => continue,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the policy state");
                    continue;
                }
            }
            match services.reload_policies().await {
                Ok(g) => {
                    if generation.is_some() {
                        tracing::info!(generation = g, "policies reloaded");
                    }
                    generation = Some(g);
                }
                Err(e) => {
                    tracing::error!(error = %e, "could not reload policies; keeping the previous ones")
                }
            }
        }
    });
}

/// Runs `batch` on every tick of `every` (a late tick is delayed, not bunched), and again at
/// once for as long as it answers that more is waiting.
fn in_batches_every<F>(every: Duration, mut batch: impl FnMut() -> F + Send + 'static)
where
    F: Future<Output = bool> + Send,
{
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            while batch().await {}
        }
    });
}

/// Deletes expired committed idempotency outcomes in the background, a batch at a time so no
/// statement holds many rows.
pub(super) fn purge_outcomes_every(store: Arc<dyn OutcomeStore>, every: Duration) {
    const BATCH: i64 = 1000;
    in_batches_every(every, move || {
        let store = store.clone();
        async move {
            let now = chrono::Utc::now().timestamp_millis();
            match store.purge_outcomes(now, BATCH).await {
                Ok(purged) => purged as i64 == BATCH,
                Err(e) => {
                    tracing::warn!(error = %e, "could not purge expired idempotency outcomes");
                    false
                }
            }
        }
    });
}

/// Fails overdue runner commands every `every`; the rule (which are overdue, what they become,
/// once across replicas) is the service's. A full batch that failed something is followed by
/// the next at once; one that failed nothing (others got there first) waits for the tick.
pub(super) fn sweep_timeouts(services: Arc<Services>, every: Duration) {
    in_batches_every(every, move || {
        let services = services.clone();
        async move {
            let started = chrono::Utc::now();
            match services.time_out_overdue_commands().await {
                Ok(sweep) => {
                    let passes = services.background_passes();
                    passes.completed(BackgroundTask::CommandTimeouts, started);
                    sweep.more && sweep.failed > 0
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the command timeout sweep failed; retrying at the next tick");
                    false
                }
            }
        }
    });
}

/// How often the audit retention pass runs.
const AUDIT_RETENTION_EVERY: Duration = Duration::from_secs(60);

/// Removes audit events older than their organisation's retention, 500 a transaction, behind a
/// checkpoint (`service/audit_integrity.rs`); a pass that removed some is followed by the next
/// at once. Replicas may run it together: each batch locks its workspace's row.
pub(super) fn purge_expired_audit(services: Arc<Services>) {
    in_batches_every(AUDIT_RETENTION_EVERY, move || {
        let services = services.clone();
        async move {
            match services.purge_expired_audit(chrono::Utc::now()).await {
                Ok(removed) => removed > 0,
                Err(e) => {
                    tracing::warn!(error = %e, "the audit retention pass failed; retrying at the next tick");
                    false
                }
            }
        }
    });
}

/// How often the audit head signer runs: twice a minute, so a head that moved is signed within
/// a minute even when a pass runs late.
const AUDIT_SIGN_EVERY: Duration = Duration::from_secs(30);

/// Signs the audit head of every workspace whose head moved since its last signed head
/// (`service/audit_integrity.rs`: it walks the events since that one first). Replicas may run
/// it together: the first signed head kept at a sequence wins, the others' do nothing.
pub(super) fn sign_audit_heads(services: Arc<Services>) {
    in_batches_every(AUDIT_SIGN_EVERY, move || {
        let services = services.clone();
        async move {
            if let Err(e) = services.sign_audit_heads(chrono::Utc::now()).await {
                tracing::warn!(error = %e, "the audit head signer failed; retrying at the next tick");
            }
            false
        }
    });
}

/// Gives tokens near their expiry their `token.expiring` events every `every`; the rule (which
/// tokens, once across replicas, which workspaces) is the service's.
pub(super) fn notice_expiring_tokens(services: Arc<Services>, notice: Span, every: Duration) {
    if notice.is_zero() {
        return;
    }
    in_batches_every(every, move || {
        let services = services.clone();
        async move {
            let started = chrono::Utc::now();
            match services.notice_expiring_tokens(notice).await {
                Ok((_, more)) => {
                    let passes = services.background_passes();
                    passes.completed(BackgroundTask::TokenExpiryNotices, started);
                    more
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the token expiry notice failed; retrying at the next tick");
                    false
                }
            }
        }
    });
}
