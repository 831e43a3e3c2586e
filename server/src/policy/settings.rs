//! What an engine is given: each decision's budgets, how many decisions run at once, and how
//! their instances get memory (a pool of resident copy-on-write slots, or fresh mappings per
//! decision, kept to measure what the pool saves).

use std::time::Duration;

use wasmtime::PoolingAllocationConfig;

/// Budgets of one decision and of the engine.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Wall-clock budget of one decision: instantiation, guest code and host waits.
    pub deadline: Duration,
    pub memory_bytes: usize,
    /// Decision slots: active decisions evaluated at once (the built-in authorizer runs in
    /// place and takes none).
    pub max_concurrent: usize,
    /// How long a decision waits for a slot before it fails as unavailable.
    pub queue_timeout: Duration,
    /// Shadow evaluations waiting for a shadow worker; more are dropped and counted.
    pub shadow_queue: usize,
    /// How instances get their memory: a pool of slots with copy-on-write images, or fresh
    /// mappings filled by copying for every decision (to measure what the pool saves).
    pub allocation: InstanceAllocation,
    /// Where compiled native code is kept across processes; `None` keeps it in memory only.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Bounds of the warm instances of policies installed `per-organisation`.
    pub warm: super::warm::WarmSettings,
}

/// How each decision's instance gets its memory, tables and stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceAllocation {
    /// Preallocated slots reused across decisions; linear memory starts as a copy-on-write
    /// mapping of the module's image, so a 10 MB snapshot of a Python or JavaScript heap costs
    /// the pages a decision touches, not a copy of all of them.
    Pooling,
    /// A fresh mapping per instance, its data segments copied in: no copy-on-write image.
    OnDemand,
}

impl InstanceAllocation {
    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw {
            "pooling" => Ok(Self::Pooling),
            "on-demand" => Ok(Self::OnDemand),
            other => Err(format!(
                "unknown instance allocation {other:?}: expected pooling or on-demand"
            )),
        }
    }
}

impl EngineSettings {
    /// Decision slots when none are configured: twice the cores this process may use. A
    /// decision is CPU work under a wall-clock deadline, so slots past the cores only share
    /// them: at 32 slots on 2 cores, 16 Python decisions at once stretched some past 50 ms and
    /// refused their requests, where 4 slots queued them (BENCHMARKS.md).
    pub fn default_concurrency() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get()) * 2
    }

    /// The slot wait when none is configured: two deadlines, as long as the slowest decision
    /// holding a slot can take, twice over.
    pub fn default_queue_timeout(deadline: Duration) -> Duration {
        deadline * 2
    }
}

impl Default for EngineSettings {
    fn default() -> Self {
        let deadline = Duration::from_millis(50);
        Self {
            deadline,
            memory_bytes: 16 << 20,
            max_concurrent: Self::default_concurrency(),
            queue_timeout: Self::default_queue_timeout(deadline),
            shadow_queue: 64,
            allocation: InstanceAllocation::Pooling,
            cache_dir: None,
            warm: super::warm::WarmSettings::default_for(Self::default_concurrency()),
        }
    }
}

/// The pool of instance slots, sized for the decisions that may run at once and for guests
/// built from interpreters: a componentize-py component instantiates 14 core modules, so 8
/// per slot would refuse the 25th concurrent Python decision. Core instances are only counted,
/// not reserved, so the headroom costs nothing.
pub(super) fn pool(
    slots: u32,
    memory_bytes: usize,
    resident_bytes: usize,
    pagemap_scan: bool,
) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(slots)
        .total_core_instances(slots * 32)
        .total_memories(slots * 4)
        .total_tables(slots * 8)
        // Every decision runs on a fiber stack (async host calls); unzeroed stacks stay
        // resident in the pool.
        .total_stacks(slots)
        .max_memory_size(memory_bytes)
        // Keep each slot's whole memory resident, and where the kernel can list the pages a
        // decision wrote (PAGEMAP_SCAN, Linux 6.7+) copy back only those from the image: a
        // Python or JavaScript heap otherwise takes a page fault for every page it touches, in
        // every decision. Without PAGEMAP_SCAN only the first MiB is kept, as memset of a
        // whole slot would cost more than the faults it saves.
        .linear_memory_keep_resident(if pagemap_scan {
            resident_bytes
        } else {
            1 << 20
        })
        .pagemap_scan(if pagemap_scan {
            wasmtime::Enabled::Yes
        } else {
            wasmtime::Enabled::No
        })
        .table_keep_resident(64 << 10);
    pool
}
