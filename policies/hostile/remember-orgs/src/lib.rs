//! Hostile: remembers every organisation it has been asked about, in a global, and denies once
//! it has seen two. In a fresh instance per decision it always allows; an instance kept warm
//! and shared between organisations gives itself away (isolation tests of `--instances`).
wit_bindgen::generate!({ world: "authorizer", path: "../../wit" });
use control_plane::policy::types::{Denial, DenyStatus};
use std::sync::Mutex;

/// Distinct organisation ids in the order first seen; survives as long as the instance does.
static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct RememberOrgs;
impl Guest for RememberOrgs {
    fn authorize(request: AuthzRequest) -> AuthzDecision {
        let mut seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let organisation = request.principal.organisation_id;
        if !seen.contains(&organisation) {
            seen.push(organisation);
        }
        if seen.len() < 2 {
            return AuthzDecision::Allow;
        }
        AuthzDecision::Deny(Denial {
            status: DenyStatus::Forbidden,
            reason: format!("seen organisations: {}", seen.join(", ")),
        })
    }
}
export!(RememberOrgs);
