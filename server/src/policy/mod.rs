//! Policy components: authorization and review moderation decided by WebAssembly components
//! that implement the WIT worlds in `policies/wit/`.
//!
//! One wasmtime [`Engine`](wasmtime::Engine) per process; each policy is compiled once; every
//! decision runs in a fresh instance (no state survives between decisions) with a time budget
//! (epoch deadline), a memory cap and a bound on concurrent evaluations. Anything going wrong
//! fails closed: authorization denied, review held.

mod cases;
mod engine;
mod runtime;
#[cfg(test)]
mod tests;
mod wit;

pub use cases::{CaseResult, run_cases};
pub use engine::{
    CompiledPolicy, EngineSettings, ModerationInput, ModerationOutcome, PolicyEngine,
    PolicyFailure, PolicyKind, ReportInput, Verdict,
};
pub use runtime::{Disagreement, DisagreementSink, PolicyRuntime};
pub use wit::AuthzInput;

/// The default policies, built from `policies/` by `server/build.rs` and embedded.
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
}

/// Hex SHA-256 of a component: the identity of a policy version.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
