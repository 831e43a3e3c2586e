//! Policy components: authorization and review moderation decided by WebAssembly components
//! that implement the WIT worlds in `policies/wit/`.
//!
//! One wasmtime [`Engine`](wasmtime::Engine) per process; each policy is compiled once; every
//! decision runs in a fresh instance (no state survives between decisions), or for a version
//! installed `per-organisation` in a warm instance that serves one organisation only
//! (`warm.rs`), with a wall-clock time budget (the deadline), a memory cap and a bound on
//! concurrent evaluations. Anything going wrong fails closed: authorization denied, review
//! held, and a warm instance dropped.
//!
//! # The deadline covers host calls too
//!
//! A guest spends its time in two places: its own code, and host calls (WASI). The epoch
//! deadline interrupts guest code only; a guest blocked in a host call, such as the WASI clock
//! wait `std::thread::sleep` becomes on wasm32-wasip2, is not running wasm and never sees it.
//! So WASI is linked with its async host (`add_to_linker_async`), every decision is a future
//! (`instantiate_async`, `call_async`, on a fiber stack), and that whole future runs under
//! `tokio::time::timeout(deadline)`: a guest waiting in the host is dropped at the deadline,
//! store and all, exactly where a spinning guest traps. The epoch deadline stays for guest code,
//! which holds the thread inside one `poll` and so cannot be reached by a timer.
//!
//! The alternative, keeping the synchronous host and clamping the clock, does not hold up:
//! wasmtime-wasi's sleeps are tokio timers that do not consult the context's clock, so clamping
//! them means overriding `subscribe-duration`, `subscribe-instant` and every other import that
//! can block, one by one, and any import added later would escape the budget again. The timeout
//! bounds all of them at once.
//!
//! # Slots and the shadow
//!
//! An installed policy may spin to its deadline, so it runs on a blocking thread (which drives
//! its future, on timers of the engine's own) in one of `max_concurrent` decision slots; the
//! built-in authorizer takes microseconds and runs in place on the request's task. Freed slots
//! go to the waiting organisations in turn (`slots.rs`). A decision waits for a slot at most
//! `queue_timeout`, then fails as [`PolicyFailure::Unavailable`]: authorization answers 503
//! `unavailable` with `retry-after`, a review is held. Shadow evaluations go through a bounded
//! queue to a fixed number of workers that use no slot (`runtime.rs`); a full queue drops the
//! evaluation and counts it in `policy_shadow_dropped_total`.

mod budget;
#[cfg(test)]
mod cache_tests;
mod cases;
mod coverage;
mod decisions;
mod engine;
mod instances;
mod memo;
mod moderation;
mod native_cache;
mod runtime;
mod settings;
mod slots;
#[cfg(test)]
mod tests;
mod ticker;
mod warm;
#[cfg(test)]
mod warm_tests;
mod wit;

pub use budget::{
    BudgetReport, DEFAULT_RUNS, MEMORY_CEILING_MIB, MemoryBudget, PeakMemory, measure,
    shipped_cases,
};
pub use cases::{CaseResult, run_cases};
pub use coverage::{Coverage, CoverageRow};
pub use decisions::{
    DecisionEvent, DecisionLog, DecisionMetrics, DecisionOutcome, PolicyName, REASON_MAX,
    failure_kind,
};
pub use engine::{
    CompiledPolicy, DecisionProfile, NativeCodeCounts, PolicyEngine, PolicyFailure, PolicyKind,
};
pub use instances::Instances;
pub use moderation::{ModerationInput, ModerationOutcome, ReportInput, Verdict};
pub use runtime::{Disagreement, DisagreementSink, PolicyRuntime};
pub use settings::{EngineSettings, InstanceAllocation};
pub use warm::WarmSettings;
pub use wit::AuthzInput;

/// The default policies, built from `policies/` into `policies/dist/` and embedded.
pub mod defaults {
    pub const AUTHORIZER: &[u8] = include_bytes!(env!("POLICY_AUTHZ_WASM"));
    pub const MODERATOR: &[u8] = include_bytes!(env!("POLICY_MODERATION_WASM"));
}

/// Components that misbehave on purpose, for the containment tests and benchmarks.
pub mod fixtures {
    pub const SPIN: &[u8] = include_bytes!(env!("POLICY_HOSTILE_SPIN_WASM"));
    pub const BOMB: &[u8] = include_bytes!(env!("POLICY_HOSTILE_BOMB_WASM"));
    pub const TRAP: &[u8] = include_bytes!(env!("POLICY_HOSTILE_TRAP_WASM"));
    pub const DENY_ALL: &[u8] = include_bytes!(env!("POLICY_DENY_ALL_WASM"));
    /// Sleeps 30 s in a WASI clock wait (a blocking host call) before allowing.
    pub const SLEEP: &[u8] = include_bytes!(env!("POLICY_HOSTILE_SLEEP_WASM"));
    /// The default authorizer as built against `control-plane:policy@1.0.0` (no role).
    pub const AUTHZ_1_0_0: &[u8] = include_bytes!(env!("POLICY_AUTHZ_1_0_0_WASM"));
    /// Remembers the organisations it was asked about in a global and denies once it has seen
    /// two ("seen organisations: …"): a warm instance shared between organisations shows.
    pub const REMEMBER_ORGS: &[u8] = include_bytes!(env!("POLICY_HOSTILE_REMEMBER_ORGS_WASM"));
}

/// Hex SHA-256 of a component: the identity of a policy version.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Typical requests, for the benchmarks.
#[doc(hidden)]
pub mod bench_support {
    use super::wit::{authz_types as a, moderation_types as m};

    pub fn authz_request() -> a::AuthzRequest {
        a::AuthzRequest {
            principal: a::Principal {
                kind: a::PrincipalKind::UserToken,
                id: "0b6f1c2d-3e4b-4a5c-8d6e-7f0123456789".into(),
                user_id: "1b6f1c2d-3e4b-4a5c-8d6e-7f0123456789".into(),
                organisation_id: "2b6f1c2d-3e4b-4a5c-8d6e-7f0123456789".into(),
                workspace_ids: vec!["6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab".into()],
                environment_ids: vec![],
                scopes: crate::domain::Scope::ALL
                    .iter()
                    .map(|s| s.as_str().to_owned())
                    .collect(),
                role: a::Role::Member,
            },
            operation: "listActivity".into(),
            method: "GET".into(),
            route: "/v1/workspaces/{workspaceId}/activity".into(),
            workspace_id: Some("6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab".into()),
            resource_ids: vec![],
        }
    }

    pub fn moderation_request() -> m::ModerationRequest {
        m::ModerationRequest {
            review: m::Review {
                id: "r".into(),
                plugin_id: "p".into(),
                author_id: "a".into(),
                rating: 4,
                title: "Solid plugin".into(),
                body: "Does what it says; setup took five minutes and it has been reliable since."
                    .into(),
            },
            report: None,
            prior_reports: vec![],
            blocklist: vec!["scam".into()],
        }
    }
}
