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
