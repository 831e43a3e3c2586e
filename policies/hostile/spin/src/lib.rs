//! Hostile: never returns (the epoch deadline must stop it).
wit_bindgen::generate!({ world: "authorizer", path: "../../wit" });

struct Spin;
impl Guest for Spin {
    fn authorize(request: AuthzRequest) -> AuthzDecision {
        let mut n: u64 = request.operation.len() as u64;
        loop {
            n = std::hint::black_box(n.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}
export!(Spin);
