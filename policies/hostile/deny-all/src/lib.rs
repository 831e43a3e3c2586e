//! Denies everything: a well-behaved policy that disagrees with the default (activation,
//! rollback and shadow tests).
wit_bindgen::generate!({ world: "authorizer", path: "../../wit" });
use control_plane::policy::types::{Denial, DenyStatus};
struct DenyAll;
impl Guest for DenyAll {
    fn authorize(_request: AuthzRequest) -> AuthzDecision {
        AuthzDecision::Deny(Denial { status: DenyStatus::Forbidden, reason: "denied by deny-all".into() })
    }
}
export!(DenyAll);
