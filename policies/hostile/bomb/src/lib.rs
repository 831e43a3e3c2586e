//! Hostile: allocates until memory runs out (the memory cap must stop it).
wit_bindgen::generate!({ world: "authorizer", path: "../../wit" });

struct Bomb;
impl Guest for Bomb {
    fn authorize(_request: AuthzRequest) -> AuthzDecision {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(std::hint::black_box(vec![7u8; 1 << 20]));
        }
    }
}
export!(Bomb);
