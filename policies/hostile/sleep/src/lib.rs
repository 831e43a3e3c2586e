//! Hostile: sleeps for 30 s before allowing. `std::thread::sleep` is a WASI clock wait (a
//! blocking host call, not guest code), so the epoch deadline alone cannot stop it; the host's
//! wall-clock timeout must.
wit_bindgen::generate!({ world: "authorizer", path: "../../wit" });

struct Sleep;
impl Guest for Sleep {
    fn authorize(_request: AuthzRequest) -> AuthzDecision {
        std::thread::sleep(std::time::Duration::from_secs(30));
        AuthzDecision::Allow
    }
}
export!(Sleep);
