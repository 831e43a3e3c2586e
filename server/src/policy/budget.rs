//! Budgets measured before activation: a component runs its cases many times, each decision in
//! a fresh instance under the deadline exactly as the server runs it, and the report gives the
//! decision time at p50, p99 and max and the largest linear memory any decision asked for,
//! against the deadline and the version's memory budget. A version has a memory budget of its
//! own (set at install, at most [`MEMORY_CEILING_MIB`]), which the store's limiter enforces at
//! every decision; the [`Limiter`] also records the largest growth asked for.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

use super::cases::{decide, parse_cases};
use super::engine::{CompiledPolicy, PolicyEngine, PolicyKind};
use super::settings::EngineSettings;

/// The largest memory budget a version may have: the pooling allocator's largest memory, so
/// it is a bound, not a default; decisions run under the version's own budget.
pub const MEMORY_CEILING_MIB: u32 = 256;

/// Decisions a measurement runs: with 200, the p99 is the third slowest.
pub const DEFAULT_RUNS: u32 = 200;

/// The cases a component is measured on when none are given: the default policy's own.
pub fn shipped_cases(kind: PolicyKind) -> &'static str {
    match kind {
        PolicyKind::Authorizer => include_str!("../../../policies/authz/cases.json"),
        PolicyKind::Moderator => include_str!("../../../policies/moderation/cases.json"),
    }
}

/// What the pool must allow one memory: the ceiling, or the server's budget if larger.
pub(super) fn pool_memory_bytes(settings: &EngineSettings) -> usize {
    settings
        .memory_bytes
        .max((MEMORY_CEILING_MIB as usize) << 20)
}

/// The memory budget of one policy version: 1 MiB to [`MEMORY_CEILING_MIB`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    mib: u32,
}

impl MemoryBudget {
    pub fn from_mib(mib: u64) -> Result<Self, String> {
        match u32::try_from(mib) {
            Ok(mib) if (1..=MEMORY_CEILING_MIB).contains(&mib) => Ok(Self { mib }),
            _ => Err(format!(
                "must be 1 to {MEMORY_CEILING_MIB} MiB (the engine's ceiling), not {mib}"
            )),
        }
    }

    /// The server's own budget (`CP_POLICY_MEMORY_MIB`), for a version installed without one.
    pub fn server_default(settings: &EngineSettings) -> Self {
        Self {
            mib: u32::try_from((settings.memory_bytes >> 20).max(1)).unwrap_or(u32::MAX),
        }
    }

    pub fn mib(self) -> u32 {
        self.mib
    }

    pub fn bytes(self) -> usize {
        (self.mib as usize) << 20
    }
}

impl CompiledPolicy {
    /// This version with its own memory budget.
    pub fn with_memory_budget(mut self, budget: MemoryBudget) -> Self {
        self.memory_bytes = budget.bytes();
        self
    }

    pub fn memory_budget_bytes(&self) -> usize {
        self.memory_bytes
    }
}

/// The largest linear memory, in bytes, any decision measured with it asked for.
#[derive(Debug, Clone, Default)]
pub struct PeakMemory(Arc<AtomicUsize>);

impl PeakMemory {
    pub fn bytes(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// A store's memory limiter: the version's budget, failing the decision beyond it, and the
/// largest size asked for (refused or not), when measuring.
pub(super) struct Limiter {
    limits: StoreLimits,
    peak: Option<PeakMemory>,
    /// Bytes of the largest linear memory granted, and of all of them together (profiling).
    largest: usize,
    total: usize,
}

impl Limiter {
    pub(super) fn new(memory_bytes: usize, peak: Option<&PeakMemory>) -> Self {
        Self {
            limits: StoreLimitsBuilder::new()
                .memory_size(memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            peak: peak.cloned(),
            largest: 0,
            total: 0,
        }
    }

    /// The largest linear memory granted and all of them together, in bytes.
    pub(super) fn sizes(&self) -> (usize, usize) {
        (self.largest, self.total)
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if let Some(peak) = &self.peak {
            peak.0.fetch_max(desired, Ordering::Relaxed);
        }
        let granted = self.limits.memory_growing(current, desired, maximum)?;
        if granted {
            self.largest = self.largest.max(desired);
            self.total += desired.saturating_sub(current);
        }
        Ok(granted)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }
}

/// What a measurement found.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetReport {
    /// Decisions run; fewer than asked when the measurement already had to refuse.
    pub decisions: u32,
    /// Decisions that failed (a trap, the deadline, the memory budget).
    pub failures: u32,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub peak_memory_bytes: u64,
    pub deadline: Duration,
    pub memory_budget: MemoryBudget,
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

impl BudgetReport {
    /// One line: `decision p50 0.21 ms, p99 0.40 ms (deadline 50 ms); peak memory 1.1 MiB
    /// (budget 16 MiB)`.
    pub fn summary(&self) -> String {
        format!(
            "decision p50 {}, p99 {}, max {} (deadline {} ms); peak memory {} (budget {} MiB)",
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
            self.deadline.as_millis(),
            mib(self.peak_memory_bytes),
            self.memory_budget.mib()
        )
    }

    /// Why this version should not be activated: a p99 that reaches the deadline (one decision
    /// in a hundred would fail closed), or a decision that asked for more than its budget.
    pub fn over_budget(&self) -> Option<String> {
        let mut reasons = Vec::new();
        if self.p99 >= self.deadline {
            reasons.push(format!(
                "measured p99 {} reaches the deadline of {} ms",
                ms(self.p99),
                self.deadline.as_millis()
            ));
        }
        if self.peak_memory_bytes > self.memory_budget.bytes() as u64 {
            reasons.push(format!(
                "peak memory {} exceeds the budget of {} MiB",
                mib(self.peak_memory_bytes),
                self.memory_budget.mib()
            ));
        }
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }
}

/// Runs `runs` decisions of `component` on `cases` (the shipped cases of its kind when
/// `None`), cycling through them, one at a time in fresh instances under `memory`. It stops
/// early once the report can only refuse: when enough decisions reached the deadline that the
/// p99 must, or one asked for more memory than the budget. A component that spins is known
/// after three deadlines, not two hundred.
pub async fn measure(
    engine: &PolicyEngine,
    kind: PolicyKind,
    component: &[u8],
    cases: Option<&str>,
    memory: MemoryBudget,
    runs: u32,
) -> Result<BudgetReport, String> {
    let policy = engine.compile(kind, component)?.with_memory_budget(memory);
    let cases = parse_cases(kind, cases.unwrap_or(shipped_cases(kind)))?;
    if cases.is_empty() {
        return Err("the cases file has no case to measure with".into());
    }
    let runs = runs.max(1);
    let deadline = engine.settings().deadline;
    // Decisions at or past the deadline that put the p99 there.
    let decisive = runs - p99_index(runs as usize) as u32;
    let peak = PeakMemory::default();
    let mut times = Vec::with_capacity(runs as usize);
    let (mut failures, mut late) = (0, 0);
    for case in cases.iter().cycle().take(runs as usize) {
        let started = Instant::now();
        let answer = decide(engine, &policy, &case.request, Some(&peak)).await;
        let took = started.elapsed();
        times.push(took);
        failures += u32::from(answer.starts_with("error"));
        late += u32::from(took >= deadline);
        // Stop once the verdict is known: the p99 of these decisions, or of all the runs, is
        // already at the deadline, or one decision asked for more than the budget.
        if late >= decisive || peak.bytes() > memory.bytes() {
            break;
        }
    }
    let decisions = times.len() as u32;
    times.sort();
    Ok(BudgetReport {
        decisions,
        failures,
        p50: times[times.len() / 2],
        p99: times[p99_index(times.len())],
        max: times[times.len() - 1],
        peak_memory_bytes: peak.bytes() as u64,
        deadline,
        memory_budget: memory,
    })
}

/// The index of the 99th percentile in `n` sorted samples (nearest rank).
fn p99_index(n: usize) -> usize {
    (n * 99).div_ceil(100).max(1) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_budgets_are_bounded_by_the_ceiling() {
        assert!(MemoryBudget::from_mib(0).is_err());
        assert_eq!(MemoryBudget::from_mib(16).unwrap().bytes(), 16 << 20);
        assert!(MemoryBudget::from_mib(u64::from(MEMORY_CEILING_MIB)).is_ok());
        assert!(MemoryBudget::from_mib(u64::from(MEMORY_CEILING_MIB) + 1).is_err());
    }

    #[test]
    fn the_p99_of_two_hundred_is_the_third_slowest() {
        assert_eq!(p99_index(200), 197);
        assert_eq!(p99_index(1), 0);
        assert_eq!(p99_index(100), 98);
    }
}
