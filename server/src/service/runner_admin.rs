//! Runners and deliveries after the fact: a pool's runners with their health, the
//! rule that disables a runner after sustained failure, an administrator's disable, enable and
//! remove, and resending deliveries (`cpctl runners …`, `cpctl deliveries …`).
//!
//! A resend never moves a finished command back: `failed` is final in the v1 contract. A
//! `pending` delivery of an open command gets a new attempt now; a `failed` one is resent as a
//! new `queued` command whose delivery carries the failed one's `webhook-id`, so a runner that
//! deduplicates on it (and may have run the first) runs the command at most once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

use super::admin::admin_event;
use super::runners::runner_event;
use super::{ServiceError, Services};
use crate::domain::{Actor, CorrelationId, DeliveryStatus, NewAuditEvent};
use crate::storage::{
    DeliveryFilter, DeliverySummary, LeasedAttempt, RemovedRunner, ResendFailed, RunnerHealth,
    RunnerStatus, StillFailing, WriteContext,
};

/// Why a runner was disabled, as its event and `cpctl runners list` say.
pub const REASON_FAILURES: &str = "consecutive_failures";
pub const REASON_ADMIN: &str = "admin";

/// At most this many failed deliveries are resent by one `recover`.
pub const RECOVER_LIMIT: u32 = 10_000;

/// When a failing runner is disabled (`--runner-disable-after-failures`,
/// `--runner-disable-failing-secs`): after `failures` failed attempts in a row **and** at least
/// `failing_for` since the first of them, so neither a burst of quick failures nor one slow
/// failure an hour disables a runner on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisableRule {
    /// 0: never.
    pub failures: u32,
    pub failing_for: Duration,
}

impl Default for DisableRule {
    fn default() -> Self {
        Self {
            failures: 10,
            failing_for: Duration::from_secs(15 * 60),
        }
    }
}

impl DisableRule {
    pub fn applies(&self, health: &RunnerHealth, now: DateTime<Utc>) -> bool {
        let Some(since) = health.failing_since else {
            return false;
        };
        let failing_for =
            chrono::Duration::from_std(self.failing_for).unwrap_or(chrono::Duration::MAX);
        self.failures > 0
            && !health.disabled
            && !health.removed
            && i64::from(health.consecutive_failures) >= i64::from(self.failures)
            && now - since >= failing_for
    }
}

/// What `resend` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Resent {
    /// The delivery resent.
    pub delivery_id: Uuid,
    /// The delivery that carries the new attempt: the same one (it was `pending`) or the
    /// delivery of the new command (it had `failed`).
    pub sent_as: Uuid,
    pub new_command_id: Option<Uuid>,
    /// The same as the resent delivery's attempts carried.
    pub webhook_id: Uuid,
}

fn wrong_state(message: String) -> ServiceError {
    ServiceError::Conflict {
        code: "invalid_state",
        message,
        details: None,
    }
}

impl Services {
    /// Every runner of a pool, with its state, failures and keys.
    pub async fn list_runners(&self, pool_id: Uuid) -> Result<Vec<RunnerStatus>, ServiceError> {
        self.store
            .get_pool(pool_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such runner pool"))?;
        Ok(self.store.list_runners(pool_id).await?)
    }

    async fn runner_state(&self, runner_id: Uuid) -> Result<RunnerHealth, ServiceError> {
        self.store
            .runner_health(runner_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such runner"))
    }

    /// An administrator's disable (`reason: admin`). Like `users disable`, a repeat changes
    /// nothing and says so (`Ok(false)`), keeping the first disabling's reason.
    pub async fn disable_runner(
        &self,
        runner_id: Uuid,
        cid: &CorrelationId,
    ) -> Result<bool, ServiceError> {
        let (_, _, workspace) = self.runner_with_owners(runner_id).await?;
        let state = self.runner_state(runner_id).await?;
        if state.removed {
            return Err(wrong_state("the runner is removed".into()));
        }
        if state.disabled {
            return Ok(false);
        }
        let data = json!({ "reason": REASON_ADMIN });
        let event = runner_event(&workspace, "runner.disabled", runner_id, cid, data);
        let write = WriteContext::admin(cid);
        if !self
            .store
            .disable_runner(&write, runner_id, REASON_ADMIN, None, &event)
            .await?
        {
            return self.unchanged_unless_removed(runner_id).await;
        }
        Ok(true)
    }

    /// Brings a disabled runner back, its failures forgotten; `Ok(false)` when it was enabled.
    pub async fn enable_runner(
        &self,
        runner_id: Uuid,
        cid: &CorrelationId,
    ) -> Result<bool, ServiceError> {
        let (_, _, workspace) = self.runner_with_owners(runner_id).await?;
        let state = self.runner_state(runner_id).await?;
        if state.removed {
            return Err(wrong_state("the runner is removed".into()));
        }
        if !state.disabled {
            return Ok(false);
        }
        let event = runner_event(&workspace, "runner.enabled", runner_id, cid, json!({}));
        let write = WriteContext::admin(cid);
        if !self
            .store
            .enable_runner(&write, runner_id, Self::now(), &event)
            .await?
        {
            return self.unchanged_unless_removed(runner_id).await;
        }
        Ok(true)
    }

    /// A disable or enable that lost a race: another one did the same (no change), or a
    /// removal came first (refused).
    async fn unchanged_unless_removed(&self, runner_id: Uuid) -> Result<bool, ServiceError> {
        match self.runner_state(runner_id).await?.removed {
            true => Err(wrong_state("the runner is removed".into())),
            false => Ok(false),
        }
    }

    /// Removes a runner for good: its keys revoked (its signed reports are refused), never
    /// chosen again, and its `pending` deliveries sent to another runner of the pool.
    pub async fn remove_runner(
        &self,
        runner_id: Uuid,
        cid: &CorrelationId,
    ) -> Result<RemovedRunner, ServiceError> {
        let (_, _, workspace) = self.runner_with_owners(runner_id).await?;
        let event = runner_event(&workspace, "runner.removed", runner_id, cid, json!({}));
        let write = WriteContext::admin(cid);
        self.store
            .remove_runner(&write, runner_id, Self::now(), &event)
            .await?
            .ok_or_else(|| wrong_state("the runner is already removed".into()))
    }

    /// After a failed attempt: disables its runner if the rule says so, with a
    /// `runner.disabled` event (actor `system`). Another replica's finish may get there
    /// first; the store disables once.
    pub(super) async fn apply_disable_rule(
        &self,
        attempt: &LeasedAttempt,
    ) -> Result<(), ServiceError> {
        let rule = self.settings.deliveries.disable;
        if rule.failures == 0 {
            return Ok(());
        }
        let Some(health) = self.store.runner_health(attempt.runner_id).await? else {
            return Ok(());
        };
        let now = Self::now();
        if !rule.applies(&health, now) {
            return Ok(());
        }
        // The rule again, under the lock: another replica's success may have reset the run.
        let still_failing = StillFailing {
            failures: i32::try_from(rule.failures).unwrap_or(i32::MAX),
            failing_since_at_most: chrono::Duration::from_std(rule.failing_for)
                .ok()
                .and_then(|d| now.checked_sub_signed(d))
                .unwrap_or(DateTime::<Utc>::MIN_UTC),
        };
        let write = WriteContext::system();
        let event = NewAuditEvent {
            organisation_id: attempt.organisation_id,
            workspace_id: Some(attempt.workspace_id),
            event_type: "runner.disabled",
            actor: Actor::system(),
            target_kind: "runner",
            target_id: attempt.runner_id,
            correlation_id: write.correlation_id().to_string(),
            occurred_at: now,
            data: json!({
                "reason": REASON_FAILURES,
                "failures": health.consecutive_failures,
                "since": health.failing_since.map(crate::domain::Timestamp::new),
                "rule": {
                    "failures": rule.failures,
                    "failingForSeconds": rule.failing_for.as_secs(),
                },
            }),
        };
        if self
            .store
            .disable_runner(
                &write,
                attempt.runner_id,
                REASON_FAILURES,
                Some(still_failing),
                &event,
            )
            .await?
        {
            tracing::warn!(
                runner_id = %attempt.runner_id,
                failures = health.consecutive_failures,
                "runner disabled after sustained delivery failures"
            );
        }
        Ok(())
    }

    /// A pool's deliveries, last changed first.
    pub async fn list_deliveries(
        &self,
        pool_id: Uuid,
        status: Option<DeliveryStatus>,
        since: Option<DateTime<Utc>>,
        limit: u32,
    ) -> Result<Vec<DeliverySummary>, ServiceError> {
        self.store
            .get_pool(pool_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such runner pool"))?;
        let filter = DeliveryFilter {
            pool_id,
            status,
            since,
            limit,
        };
        Ok(self.store.list_deliveries(&filter).await?)
    }

    /// Resends a delivery: a `pending` one of an open command gets an attempt now; a `failed`
    /// one becomes a new `queued` command whose delivery carries its `webhook-id`, once.
    pub async fn resend_delivery(
        &self,
        delivery_id: Uuid,
        cid: &CorrelationId,
    ) -> Result<Resent, ServiceError> {
        let d = self
            .store
            .delivery_summary(delivery_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such delivery"))?;
        let event = |data: serde_json::Value| {
            admin_event(
                d.organisation_id,
                Some(d.workspace_id),
                "delivery.resent",
                "webhook_delivery",
                d.id,
                cid,
                data,
            )
        };
        let write = WriteContext::admin(cid);
        let now = Self::now();
        match d.status {
            DeliveryStatus::Pending if d.command_status.is_open() => {
                let data = json!({
                    "commandId": d.command_id,
                    "webhookId": d.webhook_id,
                    "resentAs": d.id,
                    "newCommandId": null,
                });
                if !self
                    .store
                    .resend_pending(&write, d.id, now, &event(data))
                    .await?
                {
                    return Err(wrong_state(
                        "the delivery has an attempt in flight, or is no longer pending; try again when it ends"
                            .into(),
                    ));
                }
                Ok(Resent {
                    delivery_id: d.id,
                    sent_as: d.id,
                    new_command_id: None,
                    webhook_id: d.webhook_id,
                })
            }
            DeliveryStatus::Pending => Err(wrong_state(format!(
                "the delivery's command is {}; it is not sent again",
                d.command_status
            ))),
            DeliveryStatus::Failed => {
                if let Some(resent_as) = d.resent_as {
                    return Err(wrong_state(format!(
                        "the delivery was already resent as delivery {resent_as}"
                    )));
                }
                if d.pool_deleted {
                    return Err(ServiceError::Conflict {
                        code: "pool_deleted",
                        message: "the runner pool is deleted".into(),
                        details: None,
                    });
                }
                let new_command_id = Uuid::new_v4();
                let new_delivery_id = Uuid::new_v4();
                let deadline_at =
                    now + chrono::Duration::seconds(i64::from(d.timeout_seconds.max(1)));
                let data = json!({
                    "commandId": d.command_id,
                    "webhookId": d.webhook_id,
                    "resentAs": new_delivery_id,
                    "newCommandId": new_command_id,
                });
                let resend = ResendFailed {
                    delivery_id: d.id,
                    new_command_id,
                    new_delivery_id,
                    webhook_id: d.webhook_id,
                    at: now,
                    deadline_at,
                    // The new command is submitted like any other, so a stream or export
                    // consumer that follows `runner_command.submitted` sees it; its text is
                    // the original's, whose digest that command's own event already carries.
                    events: vec![
                        event(data),
                        admin_event(
                            d.organisation_id,
                            Some(d.workspace_id),
                            "runner_command.submitted",
                            "runner_command",
                            new_command_id,
                            cid,
                            json!({
                                "poolId": d.pool_id,
                                "timeoutSeconds": d.timeout_seconds,
                                "deliveryId": new_delivery_id,
                                "resentFrom": d.command_id,
                            }),
                        ),
                    ],
                };
                if !self.store.resend_failed(&write, &resend).await? {
                    return Err(wrong_state(
                        "the delivery was resent meanwhile or its pool deleted".into(),
                    ));
                }
                Ok(Resent {
                    delivery_id: d.id,
                    sent_as: new_delivery_id,
                    new_command_id: Some(new_command_id),
                    webhook_id: d.webhook_id,
                })
            }
            other => Err(wrong_state(format!(
                "the delivery is {other}: only a pending or failed delivery can be resent"
            ))),
        }
    }

    /// Resends every delivery of the pool that failed at or after `since` and was not resent
    /// yet, each once; returns what was resent.
    pub async fn recover_deliveries(
        &self,
        pool_id: Uuid,
        since: DateTime<Utc>,
        cid: &CorrelationId,
    ) -> Result<Vec<Resent>, ServiceError> {
        let failed = self
            .list_deliveries(
                pool_id,
                Some(DeliveryStatus::Failed),
                Some(since),
                RECOVER_LIMIT,
            )
            .await?;
        let mut resent = Vec::new();
        for d in failed.iter().filter(|d| d.resent_as.is_none()) {
            match self.resend_delivery(d.id, cid).await {
                Ok(r) => resent.push(r),
                // Resent meanwhile (another recover), or its pool deleted: skipped.
                Err(ServiceError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(resent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(failures: i32, since_secs_ago: Option<i64>, now: DateTime<Utc>) -> RunnerHealth {
        RunnerHealth {
            consecutive_failures: failures,
            failing_since: since_secs_ago.map(|s| now - chrono::Duration::seconds(s)),
            disabled: false,
            removed: false,
        }
    }

    #[test]
    fn a_runner_is_disabled_only_after_enough_failures_for_long_enough() {
        let rule = DisableRule::default();
        let now = Utc::now();
        assert!(rule.applies(&health(10, Some(900), now), now));
        assert!(!rule.applies(&health(9, Some(3600), now), now));
        assert!(!rule.applies(&health(50, Some(899), now), now));
        assert!(!rule.applies(&health(10, None, now), now));
        let off = DisableRule {
            failures: 0,
            ..rule
        };
        assert!(!off.applies(&health(100, Some(3600), now), now));
        let mut disabled = health(10, Some(900), now);
        disabled.disabled = true;
        assert!(!rule.applies(&disabled, now));
    }
}
