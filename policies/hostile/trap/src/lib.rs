//! Hostile: traps at once.
wit_bindgen::generate!({ world: "authorizer", path: "../../wit" });

struct Trap;
impl Guest for Trap {
    fn authorize(request: AuthzRequest) -> AuthzDecision {
        if std::hint::black_box(!request.operation.is_empty()) {
            std::process::abort();
        }
        AuthzDecision::Allow
    }
}
export!(Trap);
