//! `cpctl policies`: testing a policy component against its cases (local), and installing,
//! activating, rolling back, shadowing and removing components over HTTP, with the instances
//! mode a version is installed with; `webhooks keys`.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_install_activate_roll_back_and_refuse_the_wrong_world() {
    use control_plane::policy::{defaults, fixtures};
    let db = Db::new().await;
    let server = served(&db).await;
    let out = install(&server, "garbage", b"not a component at all", "junk");
    assert!(!out.status.success());
    assert!(
        failure(&out).contains("malformed_component"),
        "{}",
        stderr(&out)
    );
    let out = install(&server, "moderation", defaults::MODERATOR, "wrong");
    assert!(!out.status.success());
    assert!(failure(&out).contains("wrong_world"), "{}", stderr(&out));
    assert!(
        failure(&out).contains("does not implement"),
        "{}",
        stderr(&out)
    );

    let out = install(&server, "deny", fixtures::DENY_ALL, "deny-all");
    assert_ok(&out);
    assert_eq!(stdout(&out).trim(), "deny-all@1");
    let shown = json_of(&server.run("policies show deny-all@1 -o json"));
    assert_eq!(shown["reference"], "deny-all@1");
    // Activated, deny-all would refuse the operator too: the default authorizer is.
    assert_ok(&install(&server, "authz", defaults::AUTHORIZER, "std"));
    assert_ok(&server.run("policies activate std@1"));
    let list = json_of(&server.run("policies list -o json"));
    assert_eq!(list["active"]["authorizer"], "std@1");
    assert_eq!(list["policies"][0]["reference"], "deny-all@1");
    assert_eq!(list["policies"].as_array().unwrap().len(), 2, "{list}");
    let removed = server.run("policies remove std@1");
    assert!(
        !removed.status.success(),
        "an activated version stays for rollback"
    );
    let rolled = server.run("policies rollback authorizer");
    assert!(stdout(&rolled).contains("built-in"), "{}", stdout(&rolled));
    let again = server.run("policies rollback authorizer");
    assert!(!again.status.success(), "nothing left to roll back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_install_with_an_instances_mode_and_list_shows_it() {
    use control_plane::policy::defaults;
    let db = Db::new().await;
    let server = served(&db).await;
    let path = write_temp("authz.wasm", defaults::AUTHORIZER);
    let path = path.display();
    let warm = json_of(&server.run(&format!(
        "policies install {path} --kind authorizer --name warm --instances per-organisation -o json"
    )));
    assert_eq!(warm["instances"], "per-organisation", "{warm}");
    assert_ok(&install(&server, "authz", defaults::AUTHORIZER, "plain"));
    // Refused by cpctl itself, before anything is sent.
    let bad = server.run(&format!(
        "policies install {path} --kind authorizer --name shared --instances shared"
    ));
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("unknown instances mode"),
        "{}",
        stderr(&bad)
    );

    let list = json_of(&server.run("policies list -o json"));
    let modes: Vec<(&str, &str)> = list["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["reference"].as_str().unwrap(),
                p["instances"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        modes,
        [("plain@1", "fresh"), ("warm@1", "per-organisation")]
    );
    let table = server.run("policies list");
    assert_ok(&table);
    let table = stdout(&table);
    let header = table.lines().next().unwrap();
    assert!(header.contains("INSTANCES"), "{table}");
    let warm_row = table.lines().find(|l| l.starts_with("warm@1")).unwrap();
    assert!(warm_row.contains("per-organisation"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_roll_back_shadow_and_remove_over_http_and_keys_are_listed() {
    use control_plane::policy::defaults;
    let db = Db::new().await;
    let server = served(&db).await;
    assert_ok(&install(&server, "authz", defaults::AUTHORIZER, "std"));
    assert_ok(&install(&server, "authz", defaults::AUTHORIZER, "spare"));
    assert_ok(&server.run("policies activate std@1"));
    let shadow = json_of(&server.run("policies shadow spare@1 -o json"));
    assert_eq!(shadow["shadow"], "spare@1");
    let report = json_of(&server.run("policies shadow-report -o json"));
    assert!(report.is_array(), "{report}");
    let off = json_of(&server.run("policies shadow --off -o json"));
    assert_eq!(off["shadow"], Value::Null);
    let removed = json_of(&server.run("policies remove spare@1 -o json"));
    assert_eq!(removed["removed"], "spare@1");

    let keys = json_of(&server.run("webhooks keys -o json"));
    assert_eq!(keys[0]["current"], true, "{keys}");
    assert!(keys[0]["publicKey"].as_str().unwrap().starts_with("whpk_"));
    let table = stdout(&server.run("webhooks keys"));
    assert!(table.starts_with("KID"), "{table}");
}

/// `cpctl policies install` of `bytes` (written to a file named after `file`) as an authorizer,
/// over HTTP as the bootstrap's operator.
fn install(server: &Served, file: &str, bytes: &[u8], name: &str) -> Output {
    let path = write_temp(&format!("{file}.wasm"), bytes);
    let path = path.to_str().unwrap();
    server.run(&format!(
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
