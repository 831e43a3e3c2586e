//! Builds the policy components in `policies/` for wasm32-wasip2 and tells the compiler where
//! they are, so the server embeds default policies built from the sources in this repository
//! (nothing built is committed). Needs the `wasm32-wasip2` target (rust-toolchain.toml names it).

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// (environment variable the server reads, crate file name)
const COMPONENTS: &[(&str, &str)] = &[
    ("POLICY_AUTHZ_WASM", "authz.wasm"),
    ("POLICY_MODERATION_WASM", "moderation.wasm"),
    ("POLICY_HOSTILE_SPIN_WASM", "hostile_spin.wasm"),
    ("POLICY_HOSTILE_BOMB_WASM", "hostile_bomb.wasm"),
    ("POLICY_HOSTILE_TRAP_WASM", "hostile_trap.wasm"),
    ("POLICY_HOSTILE_SLEEP_WASM", "hostile_sleep.wasm"),
    ("POLICY_DENY_ALL_WASM", "hostile_deny_all.wasm"),
];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let policies = manifest_dir.join("..").join("policies");
    for watched in [
        "wit",
        "authz",
        "moderation",
        "hostile",
        "Cargo.toml",
        "Cargo.lock",
        ".cargo/config.toml",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            policies.join(watched).display()
        );
    }
    let target_dir =
        PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("policies-target");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(policies.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // From policies/, so its .cargo/config.toml (the guests' link flags) applies.
        .current_dir(&policies);
    // The outer build's settings are for the host; the guests get their own.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        command.env_remove(var);
    }
    let status = command
        .status()
        .expect("could not run cargo to build the policy components");
    assert!(
        status.success(),
        "building the policy components failed; is the wasm32-wasip2 target installed? (rustup target add wasm32-wasip2)"
    );
    let out = target_dir.join("wasm32-wasip2").join("release");
    for (var, file) in COMPONENTS {
        println!("cargo:rustc-env={var}={}", out.join(file).display());
    }
}
