//! Budgets of policy versions: measured at install by the server, with its own engine and
//! settings, and stored with the version; checked again before activation; and the version's
//! memory budget applied when the server compiles it. A component that is not one, or not of
//! its kind's world, or over its budgets is refused at install, each with its own ApiError code
//! (`malformed_component`, `wrong_world`, `over_budget`); `force` stores one over its budgets
//! all the same (recorded), and its activation still needs `force` of its own.

use bytes::Bytes;
use serde_json::json;
use uuid::Uuid;

use super::policies::policy_event;
use super::{Operation, ServiceError, Services};
use crate::domain::Principal;
use crate::policy::{BudgetReport, DEFAULT_RUNS, Instances, MemoryBudget, PolicyKind, measure};
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

/// A component to install, as uploaded.
#[derive(Debug, Clone)]
pub struct PolicyUpload {
    pub name: String,
    pub kind: PolicyKind,
    /// Shared, not copied, on its way to the compiler and the store.
    pub component: Bytes,
    /// This version's memory budget; `None`: the server's.
    pub memory: Option<MemoryBudget>,
    /// Cases to measure with; `None`: the shipped cases of its kind.
    pub cases: Option<String>,
    /// Store it even over its budgets (the event records it).
    pub force: bool,
    /// Fresh instances for every decision, or warm ones per organisation.
    pub instances: Instances,
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

/// A measurement as an error's details and an event's data.
pub fn budget_json(b: &BudgetReport) -> serde_json::Value {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    json!({
        "decisions": b.decisions,
        "failures": b.failures,
        "p50Ms": ms(b.p50),
        "p99Ms": ms(b.p99),
        "maxMs": ms(b.max),
        "deadlineMs": b.deadline.as_millis() as u64,
        "peakMemoryBytes": b.peak_memory_bytes,
        "memoryBudgetMib": b.memory_budget.mib(),
        "overBudget": b.over_budget(),
    })
}

/// Why the engine refused a component, as the installer's error: not of its kind's world (an
/// export or an import the world does not have), or not a component at all.
fn refused(kind: PolicyKind, reason: String) -> ServiceError {
    let world = reason.contains("does not implement the control-plane:policy/")
        || reason.contains("imports something a policy may not use");
    let (code, what) = if world {
        ("wrong_world", format!("not a {} component", kind.as_str()))
    } else {
        ("malformed_component", "not a WebAssembly component".into())
    };
    ServiceError::Unprocessable {
        code,
        message: format!("{what}: {reason}"),
        details: Some(json!({ "reason": code, "kind": kind.as_str() })),
    }
}

/// The cases file could not be read as cases: the request's fault, named as such.
fn bad_cases(reason: String) -> ServiceError {
    ServiceError::Validation(crate::domain::FieldError::new("cases", reason).into())
}

/// A policy's name: 1 to 100 of `[A-Za-z0-9._-]` ([`is_policy_name`]). The document states it
/// as written.
pub const POLICY_NAME_PATTERN: &str = "^[A-Za-z0-9._-]{1,100}$";

pub fn is_policy_name(name: &str) -> bool {
    (1..=100).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A caller the authorizer allowed to upload a policy, before its body is read: an upload
/// reads up to `--policy-upload-max-mib` (64 MiB) into memory, which nobody but an operator
/// may make the server do. Only [`Services::admit_policy_upload`] makes one, and
/// [`Services::admin_install_policy`] takes one, so no install skips the question.
#[derive(Debug, Clone)]
pub struct PolicyUploadAdmission {
    principal: Principal,
}

impl Services {
    /// Asks whether `principal` may install a policy, before the upload is read: the first step
    /// of an install (`installPolicy` is operator-only, so anyone else is refused here).
    pub async fn admit_policy_upload(
        &self,
        principal: &Principal,
    ) -> Result<PolicyUploadAdmission, ServiceError> {
        self.authorize(principal, Operation::InstallPolicy, None, vec![])
            .await?;
        Ok(PolicyUploadAdmission {
            principal: principal.clone(),
        })
    }

    /// An operator's install, once admitted: [`Self::install_measured_policy`] with the event
    /// in the operator's organisation's log.
    pub async fn admin_install_policy(
        &self,
        admitted: &PolicyUploadAdmission,
        upload: PolicyUpload,
        write: &WriteContext,
    ) -> Result<InstalledPolicy, ServiceError> {
        self.install_measured_policy(upload, write, admitted.principal.organisation_id)
            .await
    }

    /// Stores a component whatever its measurement (forced), as tests and drills install the
    /// fixtures they then force active.
    pub async fn install_policy(
        &self,
        name: &str,
        kind: PolicyKind,
        bytes: &[u8],
        write: &WriteContext,
        log: Uuid,
    ) -> Result<PolicyRecord, ServiceError> {
        let upload = PolicyUpload {
            name: name.to_owned(),
            kind,
            component: Bytes::copy_from_slice(bytes),
            memory: None,
            cases: None,
            force: true,
            instances: Instances::Fresh,
        };
        Ok(self
            .install_measured_policy(upload, write, log)
            .await?
            .policy)
    }

    /// Validates the component against the world of its kind, measures it on its cases under
    /// its memory budget with this server's engine, refuses it over its budgets unless forced,
    /// and stores it as the next version with its measurement. `log`: the organisation whose
    /// audit log records it (the acting operator's).
    pub async fn install_measured_policy(
        &self,
        upload: PolicyUpload,
        write: &WriteContext,
        log: Uuid,
    ) -> Result<InstalledPolicy, ServiceError> {
        let PolicyUpload {
            name,
            kind,
            component,
            memory,
            cases,
            force,
            instances,
        } = upload;
        if !is_policy_name(&name) {
            return Err(ServiceError::Validation(
                crate::domain::FieldError::new("name", "must be 1 to 100 of [A-Za-z0-9._-]").into(),
            ));
        }
        let engine = self
            .policy_runtime()
            .ok_or_else(|| ServiceError::Internal("no policy runtime".into()))?
            .engine()
            .clone();
        let memory = memory.unwrap_or_else(|| MemoryBudget::server_default(engine.settings()));
        let bytes = component.clone();
        let timers = tokio::runtime::Handle::current();
        // Guest code runs inside `poll`: the measurement gets a blocking thread of its own.
        let (digest, budget) = tokio::task::spawn_blocking(move || {
            let digest = engine
                .compile(kind, &bytes)
                .map_err(|reason| refused(kind, reason))?
                .digest;
            let budget = timers
                .block_on(measure(
                    &engine,
                    kind,
                    &bytes,
                    cases.as_deref(),
                    memory,
                    DEFAULT_RUNS,
                ))
                .map_err(bad_cases)?;
            Ok::<_, ServiceError>((digest, budget))
        })
        .await
        .map_err(|e| ServiceError::Internal(e.to_string()))??;
        let over = budget.over_budget();
        if let (Some(reason), false) = (&over, force) {
            return Err(ServiceError::Unprocessable {
                code: "over_budget",
                message: format!(
                    "the component is over its budgets: {reason}; install it with force to keep it all the same"
                ),
                details: Some(json!({ "reason": "over_budget", "budget": budget_json(&budget) })),
            });
        }
        let size = component.len();
        let event = |policy: &PolicyRecord| {
            policy_event(
                write,
                log,
                "policy.installed",
                policy,
                json!({
                    "size": size,
                    "forced": force && over.is_some(),
                    "instances": instances.as_str(),
                    "budget": budget_json(&budget),
                }),
            )
        };
        let policy = self
            .store
            .insert_policy(
                write,
                &name,
                kind.as_str(),
                &digest,
                &component,
                instances,
                &record(&budget),
                &event,
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
        write: &WriteContext,
        log: Uuid,
    ) -> Result<ActivatedPolicy, ServiceError> {
        let policy = self.find_policy(reference).await?;
        self.activate_version(policy, force, write, log).await
    }

    pub(super) async fn activate_version(
        &self,
        policy: PolicyRecord,
        force: bool,
        write: &WriteContext,
        log: Uuid,
    ) -> Result<ActivatedPolicy, ServiceError> {
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
        let event = policy_event(
            write,
            log,
            "policy.activated",
            &policy,
            json!({ "forced": force, "overBudget": over }),
        );
        self.store
            .activate_policy(write, &policy, force, &event)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_name_is_1_to_100_of_the_pattern_s_characters() {
        let longest = "a".repeat(100);
        for name in ["authz", "a.b_c-D9", longest.as_str()] {
            assert!(is_policy_name(name), "{name}");
        }
        let too_long = "a".repeat(101);
        for name in ["", "a b", "é", "a/b", too_long.as_str()] {
            assert!(!is_policy_name(name), "{name}");
        }
    }
}
