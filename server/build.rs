//! Points the compiler at the policy components the server embeds. They are committed, built,
//! in `policies/dist/` (rebuilt from `policies/` by `policies/build.sh`, whose `--check` CI
//! runs so they never drift from their source), so building the server needs neither the
//! `wasm32-wasip2` target nor a nested cargo.

use std::env;
use std::path::PathBuf;

/// (environment variable the server reads, file in `policies/dist/`)
const COMPONENTS: &[(&str, &str)] = &[
    ("POLICY_AUTHZ_WASM", "authz.wasm"),
    ("POLICY_MODERATION_WASM", "moderation.wasm"),
    ("POLICY_HOSTILE_SPIN_WASM", "hostile-spin.wasm"),
    ("POLICY_HOSTILE_BOMB_WASM", "hostile-bomb.wasm"),
    ("POLICY_HOSTILE_TRAP_WASM", "hostile-trap.wasm"),
    ("POLICY_HOSTILE_SLEEP_WASM", "hostile-sleep.wasm"),
    ("POLICY_DENY_ALL_WASM", "hostile-deny-all.wasm"),
    (
        "POLICY_HOSTILE_REMEMBER_ORGS_WASM",
        "hostile-remember-orgs.wasm",
    ),
    ("POLICY_AUTHZ_1_0_0_WASM", "authz-1.0.0.wasm"),
];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let dist = manifest_dir.join("..").join("policies").join("dist");
    for (var, file) in COMPONENTS {
        let path = dist.join(file);
        // Fail here, naming the file, rather than in include_bytes! with a bare path.
        assert!(
            path.is_file(),
            "{} is missing: it is committed; restore it (git checkout -- policies/dist) or rebuild it with policies/build.sh",
            path.display()
        );
        println!("cargo:rerun-if-changed={}", path.display());
        println!("cargo:rustc-env={var}={}", path.display());
    }
}
