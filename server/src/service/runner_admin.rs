//! Runners after the fact: a pool's runners with their health, the rule that disables a runner
//! after sustained failure, and an administrator's disable, enable and remove
//! (`cpctl runners …`). Deliveries after the fact are `delivery_admin.rs`'s.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

use super::runners::runner_event;
use super::{ServiceError, Services};
use crate::domain::{Actor, NewAuditEvent};
use crate::storage::{
    LeasedAttempt, RemovedRunner, RunnerHealth, RunnerStatus, StillFailing, WriteContext,
};

/// Why a runner was disabled, as its event and `cpctl runners list` say.
pub const REASON_FAILURES: &str = "consecutive_failures";
pub const REASON_ADMIN: &str = "admin";

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
        write: &WriteContext,
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
        let event = runner_event(&workspace, "runner.disabled", runner_id, write, data);
        if !self
            .store
            .disable_runner(write, runner_id, REASON_ADMIN, None, &event)
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
        write: &WriteContext,
    ) -> Result<bool, ServiceError> {
        let (_, _, workspace) = self.runner_with_owners(runner_id).await?;
        let state = self.runner_state(runner_id).await?;
        if state.removed {
            return Err(wrong_state("the runner is removed".into()));
        }
        if !state.disabled {
            return Ok(false);
        }
        let event = runner_event(&workspace, "runner.enabled", runner_id, write, json!({}));
        if !self
            .store
            .enable_runner(write, runner_id, Self::now(), &event)
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
        write: &WriteContext,
    ) -> Result<RemovedRunner, ServiceError> {
        let (_, _, workspace) = self.runner_with_owners(runner_id).await?;
        let event = runner_event(&workspace, "runner.removed", runner_id, write, json!({}));
        self.store
            .remove_runner(write, runner_id, Self::now(), &event)
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
