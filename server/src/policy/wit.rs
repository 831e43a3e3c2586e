//! The host side of the WIT worlds, and conversions from the service layer's types.

pub mod authorizer {
    wasmtime::component::bindgen!({
        world: "authorizer",
        path: "../policies/wit",
        // Eq and Hash: a request is the key of the built-in authorizer's memo (`memo.rs`).
        additional_derives: [PartialEq, Eq, Hash],
        // Called with `call_async`: WASI's host calls are async (see the module doc of `policy`).
        exports: { default: async },
    });
}

pub mod moderator {
    wasmtime::component::bindgen!({
        world: "moderator",
        path: "../policies/wit",
        additional_derives: [PartialEq],
        // Called with `call_async`: WASI's host calls are async (see the module doc of `policy`).
        exports: { default: async },
    });
}

use crate::domain::Principal;

pub use authorizer::control_plane::policy::types as authz_types;
pub use moderator::control_plane::policy::types as moderation_types;

/// Everything an authorizer is told about one request.
#[derive(Debug, Clone)]
pub struct AuthzInput {
    pub principal: Principal,
    pub operation: &'static str,
    pub method: &'static str,
    pub route: &'static str,
    pub workspace_id: Option<String>,
    pub resource_ids: Vec<(String, String)>,
}

impl AuthzInput {
    pub(super) fn to_wit(&self) -> authz_types::AuthzRequest {
        let p = &self.principal;
        authz_types::AuthzRequest {
            principal: authz_types::Principal {
                kind: authz_types::PrincipalKind::UserToken,
                id: p.token_id.to_string(),
                user_id: p.user_id.to_string(),
                organisation_id: p.organisation_id.to_string(),
                workspace_ids: p.workspace_ids.iter().map(ToString::to_string).collect(),
                environment_ids: p.environment_ids.iter().map(ToString::to_string).collect(),
                scopes: p.scopes.to_strings(),
            },
            operation: self.operation.to_owned(),
            method: self.method.to_owned(),
            route: self.route.to_owned(),
            workspace_id: self.workspace_id.clone(),
            resource_ids: self.resource_ids.clone(),
        }
    }
}
