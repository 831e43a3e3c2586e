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

/// The authorizer world of `control-plane:policy@1.0.0`, before the principal's role: a
/// component built against it keeps working, asked without the role.
pub mod authorizer_v1_0 {
    wasmtime::component::bindgen!({
        world: "authorizer",
        path: "../policies/wit-1.0.0",
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

use crate::domain::{Principal, Role};

pub use authorizer::control_plane::policy::types as authz_types;
pub use moderator::control_plane::policy::types as moderation_types;

use authorizer_v1_0::control_plane::policy::types as v1_0;

/// The question as a 1.0.0 authorizer takes it: the same, without the role.
pub(super) fn request_v1_0(request: &authz_types::AuthzRequest) -> v1_0::AuthzRequest {
    let p = &request.principal;
    v1_0::AuthzRequest {
        principal: v1_0::Principal {
            kind: match p.kind {
                authz_types::PrincipalKind::UserToken => v1_0::PrincipalKind::UserToken,
                authz_types::PrincipalKind::Runner => v1_0::PrincipalKind::Runner,
            },
            id: p.id.clone(),
            user_id: p.user_id.clone(),
            organisation_id: p.organisation_id.clone(),
            workspace_ids: p.workspace_ids.clone(),
            environment_ids: p.environment_ids.clone(),
            scopes: p.scopes.clone(),
        },
        operation: request.operation.clone(),
        method: request.method.clone(),
        route: request.route.clone(),
        workspace_id: request.workspace_id.clone(),
        resource_ids: request.resource_ids.clone(),
    }
}

/// A 1.0.0 authorizer's answer, which means the same in 1.1.0.
pub(super) fn decision_from_v1_0(decision: v1_0::AuthzDecision) -> authz_types::AuthzDecision {
    match decision {
        v1_0::AuthzDecision::Allow => authz_types::AuthzDecision::Allow,
        v1_0::AuthzDecision::Deny(d) => authz_types::AuthzDecision::Deny(authz_types::Denial {
            status: match d.status {
                v1_0::DenyStatus::Forbidden => authz_types::DenyStatus::Forbidden,
                v1_0::DenyStatus::NotFound => authz_types::DenyStatus::NotFound,
            },
            reason: d.reason,
        }),
    }
}

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
                role: match p.role {
                    Role::Member => authz_types::Role::Member,
                    Role::Admin => authz_types::Role::Admin,
                    Role::Operator => authz_types::Role::Operator,
                },
            },
            operation: self.operation.to_owned(),
            method: self.method.to_owned(),
            route: self.route.to_owned(),
            workspace_id: self.workspace_id.clone(),
            resource_ids: self.resource_ids.clone(),
        }
    }
}
