//! Budgets of policy versions: measured at install and stored with the version, checked
//! before activation, and the version's memory budget applied when the server compiles it.

use super::{ServiceError, Services};
use crate::domain::CorrelationId;
use crate::policy::{BudgetReport, DEFAULT_RUNS, MemoryBudget, PolicyKind, measure};
use crate::storage::{PolicyBudgetRecord, PolicyRecord, WriteContext};

/// A version installed, with what its measurement found.
#[derive(Debug, Clone)]
pub struct InstalledPolicy {
    pub policy: PolicyRecord,
    pub budget: BudgetReport,
}

/// A version activated; `forced` when the activation overrode its budgets.
#[derive(Debug, Clone)]
pub struct ActivatedPolicy {
    pub policy: PolicyRecord,
    /// Why the measurement would have refused it, when it was activated all the same.
    pub overridden: Option<String>,
}

fn us(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn record(b: &BudgetReport) -> PolicyBudgetRecord {
    PolicyBudgetRecord {
        memory_budget_mib: b.memory_budget.mib() as i32,
        decisions: b.decisions as i32,
        failures: b.failures as i32,
        p50_us: us(b.p50),
        p99_us: us(b.p99),
        max_us: us(b.max),
        peak_memory_bytes: i64::try_from(b.peak_memory_bytes).unwrap_or(i64::MAX),
        deadline_ms: i64::try_from(b.deadline.as_millis()).unwrap_or(i64::MAX),
        measured_at: chrono::Utc::now(),
    }
}

/// A stored measurement as a report, against the deadline this server runs under now.
fn report(r: &PolicyBudgetRecord, deadline: std::time::Duration) -> Option<BudgetReport> {
    let from_us = |v: i64| std::time::Duration::from_micros(v.max(0) as u64);
    Some(BudgetReport {
        decisions: r.decisions.max(0) as u32,
        failures: r.failures.max(0) as u32,
        p50: from_us(r.p50_us),
        p99: from_us(r.p99_us),
        max: from_us(r.max_us),
        peak_memory_bytes: r.peak_memory_bytes.max(0) as u64,
        deadline,
        memory_budget: MemoryBudget::from_mib(r.memory_budget_mib.max(0) as u64).ok()?,
    })
}

impl Services {
    /// Validates the component, measures it on `cases` (the shipped cases of its kind when
    /// `None`) under `memory` (the server's budget when `None`), and stores it as the next
    /// version with its measurement.
    pub async fn install_measured_policy(
        &self,
        name: &str,
        kind: PolicyKind,
        bytes: &[u8],
        memory: Option<MemoryBudget>,
        cases: Option<&str>,
    ) -> Result<InstalledPolicy, ServiceError> {
        if name.is_empty()
            || name.len() > 100
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(ServiceError::Validation(
                crate::domain::FieldError::new("name", "must be 1 to 100 of [A-Za-z0-9._-]").into(),
            ));
        }
        let engine = self
            .policy_runtime()
            .ok_or_else(|| ServiceError::Internal("no policy runtime".into()))?
            .engine()
            .clone();
        let (digest, budget) = {
            let memory = memory.unwrap_or_else(|| MemoryBudget::server_default(engine.settings()));
            let bytes = bytes.to_vec();
            let cases = cases.map(str::to_owned);
            let timers = tokio::runtime::Handle::current();
            // Guest code runs inside `poll`: the measurement gets a blocking thread of its own.
            tokio::task::spawn_blocking(move || {
                let digest = engine.compile(kind, &bytes)?.digest;
                let budget = timers.block_on(measure(
                    &engine,
                    kind,
                    &bytes,
                    cases.as_deref(),
                    memory,
                    DEFAULT_RUNS,
                ))?;
                Ok::<_, String>((digest, budget))
            })
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?
            .map_err(|reason| {
                ServiceError::Validation(crate::domain::FieldError::new("component", reason).into())
            })?
        };
        let policy = self
            .store
            .insert_policy(
                &WriteContext::admin(&CorrelationId::generate()),
                name,
                kind.as_str(),
                &digest,
                bytes,
                &record(&budget),
            )
            .await?;
        Ok(InstalledPolicy { policy, budget })
    }

    /// The measurement stored with a version, against this server's deadline; `None` for a
    /// version installed before versions were measured.
    pub async fn policy_budget(
        &self,
        policy: &PolicyRecord,
    ) -> Result<Option<BudgetReport>, ServiceError> {
        let deadline = self
            .policy_runtime()
            .map(|r| r.engine().settings().deadline)
            .unwrap_or_default();
        Ok(self
            .store
            .policy_budget(policy.id)
            .await?
            .and_then(|r| report(&r, deadline)))
    }

    /// Activates a version unless its measurement exceeded the deadline or its memory budget;
    /// `force` activates it all the same, and the activation records that it was forced.
    pub async fn activate_policy_with(
        &self,
        reference: &str,
        force: bool,
    ) -> Result<ActivatedPolicy, ServiceError> {
        let policy = self.find_policy(reference).await?;
        let over = self
            .policy_budget(&policy)
            .await?
            .and_then(|b| b.over_budget());
        if let (Some(reason), false) = (&over, force) {
            return Err(ServiceError::Conflict {
                code: "over_budget",
                message: format!(
                    "{}@{} is over budget: {reason}; force the activation to override",
                    policy.name, policy.version
                ),
                details: None,
            });
        }
        self.store
            .activate_policy(
                &WriteContext::admin(&CorrelationId::generate()),
                &policy,
                force,
            )
            .await?;
        if let Some(reason) = &over {
            tracing::warn!(
                policy = %format!("{}@{}", policy.name, policy.version),
                digest = %policy.digest,
                reason = %reason,
                "policy activated over its measured budgets (forced)"
            );
        }
        Ok(ActivatedPolicy {
            policy,
            overridden: over,
        })
    }

    /// The memory budget a stored version runs under: its own, or the server's.
    pub(super) async fn memory_budget_of(
        &self,
        record: Option<&PolicyRecord>,
    ) -> Result<Option<MemoryBudget>, ServiceError> {
        let Some(record) = record else {
            return Ok(None);
        };
        Ok(self
            .store
            .policy_budget(record.id)
            .await?
            .and_then(|b| MemoryBudget::from_mib(b.memory_budget_mib.max(0) as u64).ok()))
    }
}
