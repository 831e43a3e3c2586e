//! `cpctl policies`: testing a policy component against its cases, and installing,
//! activating, rolling back and removing components in the store.

use super::*;

#[test]
fn policies_test_passes_the_defaults_and_fails_a_disagreeing_component() {
    use control_plane::policy::{defaults, fixtures};
    let out = policy_test("authz.wasm", defaults::AUTHORIZER, "", "authz");
    assert_ok(&out);
    let shipped: Vec<Value> =
        serde_json::from_str(include_str!("../../../policies/authz/cases.json")).unwrap();
    let all_passed = format!("{} passed, 0 failed", shipped.len());
    assert!(String::from_utf8_lossy(&out.stdout).contains(&all_passed));
    let out = policy_test(
        "moderation.wasm",
        defaults::MODERATOR,
        "--kind moderator",
        "moderation",
    );
    assert_ok(&out);
    let out = policy_test("deny.wasm", fixtures::DENY_ALL, "", "authz");
    assert!(!out.status.success(), "a mismatch exits non-zero");
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL"));
}

#[tokio::test]
async fn policies_install_activate_roll_back_and_refuse_the_wrong_world() {
    use control_plane::policy::{defaults, fixtures};
    let db = Db::new().await;
    let out = install(&db, "garbage", b"not a component at all", "junk");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a WebAssembly component"));
    let out = install(&db, "moderation", defaults::MODERATOR, "wrong");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not implement"));

    let out = install(&db, "deny", fixtures::DENY_ALL, "deny-all");
    assert_ok(&out);
    assert_eq!(stdout(&out).trim(), "deny-all@1");
    assert!(db.run("policies activate deny-all@1").status.success());
    let list: Value = serde_json::from_str(&stdout(&db.run("policies list -o json"))).unwrap();
    assert_eq!(list["active"]["authorizer"], "deny-all@1");
    let removed = db.run("policies remove deny-all@1");
    assert!(
        !removed.status.success(),
        "an activated version stays for rollback"
    );
    let rolled = db.run("policies rollback authorizer");
    assert!(stdout(&rolled).contains("built-in"), "{}", stdout(&rolled));
    let again = db.run("policies rollback authorizer");
    assert!(!again.status.success(), "nothing left to roll back");
}

/// `cpctl policies install` of `bytes` (written to a file named after `file`) as an authorizer.
fn install(db: &Db, file: &str, bytes: &[u8], name: &str) -> Output {
    let path = write_temp(&format!("{file}.wasm"), bytes);
    let path = path.to_str().unwrap();
    db.run(&format!(
        "policies install {path} --kind authorizer --name {name}"
    ))
}

/// `cpctl policies test` of `bytes` (written to `file`) with `flags`, against the cases of the
/// policy folder `cases_of`; no database.
fn policy_test(file: &str, bytes: &[u8], flags: &str, cases_of: &str) -> Output {
    let path = write_temp(file, bytes);
    let line = format!(
        "policies test {} {flags} --cases {}",
        path.display(),
        cases(cases_of)
    );
    Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args(line.split_whitespace())
        .output()
        .unwrap()
}
