//! `cpctl policies test --require-coverage`, `policies bench`, budgets measured at `install`
//! and the activation they refuse unless forced.

use super::*;

fn cpctl(line: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args(line.split_whitespace())
        .output()
        .unwrap()
}

#[test]
fn the_default_cases_cover_every_operation_and_verdict() {
    use control_plane::policy::defaults;
    let authz = write_temp("authz.wasm", defaults::AUTHORIZER);
    let out = cpctl(&format!(
        "policies test {} --cases {} --require-coverage",
        authz.display(),
        cases("authz")
    ));
    assert_ok(&out);
    let table = stdout(&out);
    assert!(table.contains("coverage complete"), "{table}");
    assert!(table.contains("deleteRunnerPool"), "{table}");

    let moderation = write_temp("moderation.wasm", defaults::MODERATOR);
    let out = cpctl(&format!(
        "policies test {} --kind moderator --cases {} --require-coverage -o json",
        moderation.display(),
        cases("moderation")
    ));
    let report = json_of(&out);
    assert_eq!(report["complete"], true);
    let verdicts: Vec<&str> = report["coverage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["publish", "hold", "reject", "hide"]);
    assert!(report["coverage"][3]["reported"].as_u64().unwrap() >= 1);
}

#[test]
fn a_cases_file_without_a_denial_fails_the_coverage_gate_with_one_line() {
    use control_plane::policy::defaults;
    let all: Value =
        serde_json::from_str(&std::fs::read_to_string(cases("authz")).unwrap()).unwrap();
    let fewer: Vec<&Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            !(c["request"]["operation"] == "deleteRunnerPool"
                && c["expect"].as_str().unwrap().starts_with("deny"))
        })
        .collect();
    let file = write_temp(
        "fewer.json",
        serde_json::to_string(&fewer).unwrap().as_bytes(),
    );
    let authz = write_temp("authz.wasm", defaults::AUTHORIZER);
    let line = format!(
        "policies test {} --cases {}",
        authz.display(),
        file.display()
    );
    // Without the gate the report names the gap and the cases still pass.
    let out = cpctl(&line);
    assert_ok(&out);
    assert!(stdout(&out).contains("NO: no deny"), "{}", stdout(&out));
    let err = failure(&cpctl(&format!("{line} --require-coverage")));
    assert!(
        err.contains("coverage: deleteRunnerPool has no deny case"),
        "{err}"
    );
}

#[test]
fn bench_prints_the_figures_against_the_budgets() {
    use control_plane::policy::{defaults, fixtures};
    let authz = write_temp("authz.wasm", defaults::AUTHORIZER);
    let out = cpctl(&format!(
        "policies bench {} --kind authorizer",
        authz.display()
    ));
    assert_ok(&out);
    let line = stdout(&out);
    assert!(line.starts_with("200 decisions: decision p50 "), "{line}");
    assert!(line.contains("(deadline 50 ms); peak memory "), "{line}");
    assert!(line.contains("(budget 16 MiB)"), "{line}");
    assert!(!line.contains("over budget"), "{line}");

    let report = json_of(&cpctl(&format!(
        "policies bench {} --kind authorizer -o json",
        authz.display()
    )));
    assert_eq!(report["decisions"], 200);
    assert_eq!(report["failures"], 0);
    assert!(report["p99Ms"].as_f64().unwrap() < 50.0);
    assert!(report["peakMemoryBytes"].as_u64().unwrap() > 0);
    assert_eq!(report["overBudget"], Value::Null);

    // A component that spins to its deadline is known after a few decisions, not 200.
    let spin = write_temp("spin.wasm", fixtures::SPIN);
    let report = json_of(&cpctl(&format!(
        "policies bench {} --kind authorizer -o json",
        spin.display()
    )));
    assert!(report["decisions"].as_u64().unwrap() < 200, "{report}");
    assert!(
        report["overBudget"]
            .as_str()
            .unwrap()
            .contains("reaches the deadline of 50 ms"),
        "{report}"
    );

    let err = failure(&cpctl(&format!(
        "policies bench {} --kind authorizer --memory-mib 0",
        authz.display()
    )));
    assert!(err.contains("1 to 256 MiB"), "{err}");
    let bad = cpctl(&format!(
        "policies bench {} --kind authorizer --memory-mib 999",
        authz.display()
    ));
    assert_eq!(bad.status.code(), Some(2), "bad input exits 2");
}

/// No fixture needs a few MiB and then stops: the bomb grows without end, the defaults need
/// 128 KiB. So the bomb shows where a version's own budget stops it, and the default authorizer
/// that the smallest budget is enough for it.
#[test]
fn a_budget_of_its_own_stops_the_bomb_there_and_lets_a_small_policy_run() {
    use control_plane::policy::{defaults, fixtures};
    let bomb = write_temp("bomb.wasm", fixtures::BOMB);
    let report = json_of(&cpctl(&format!(
        "policies bench {} --kind authorizer --memory-mib 4 -o json",
        bomb.display()
    )));
    assert!(
        report["overBudget"]
            .as_str()
            .unwrap()
            .contains("exceeds the budget of 4 MiB"),
        "{report}"
    );
    assert_eq!(report["failures"], report["decisions"], "{report}");
    let peak = report["peakMemoryBytes"].as_u64().unwrap();
    assert!(
        peak > 4 << 20 && peak < 16 << 20,
        "stopped at its own 4 MiB, not the server's 16: {report}"
    );

    let authz = write_temp("authz.wasm", defaults::AUTHORIZER);
    let small = json_of(&cpctl(&format!(
        "policies bench {} --kind authorizer --memory-mib 1 -o json",
        authz.display()
    )));
    assert_eq!(small["failures"], 0, "{small}");
    assert!(
        small["peakMemoryBytes"].as_u64().unwrap() <= 1 << 20,
        "{small}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activating_an_over_budget_version_is_refused_unless_forced() {
    use control_plane::policy::{defaults, fixtures};
    let db = Db::new().await;
    let server = served(&db).await;
    let spin = write_temp("spin.wasm", fixtures::SPIN);
    // The server measures it, under its own deadline, and refuses it unless forced.
    let refused = failure(&server.run(&format!(
        "policies install {} --kind authorizer --name spin",
        spin.display()
    )));
    assert!(refused.contains("over_budget"), "{refused}");
    assert!(
        refused.contains("reaches the deadline of 50 ms"),
        "{refused}"
    );
    let out = server.run(&format!(
        "policies install {} --kind authorizer --name spin --force",
        spin.display()
    ));
    assert_ok(&out);
    assert_eq!(stdout(&out).trim(), "spin@1");
    assert!(stderr(&out).contains("over budget"), "{}", stderr(&out));

    let err = failure(&server.run("policies activate spin@1"));
    assert!(err.contains("over_budget"), "{err}");
    assert!(err.contains("measured p99"), "{err}");
    assert!(err.contains("reaches the deadline of 50 ms"), "{err}");
    let list = json_of(&server.run("policies list -o json"));
    assert_eq!(list["active"]["authorizer"], "built-in");

    // A version within its budgets activates without force; its figures are stored with it.
    let authz = write_temp("authz.wasm", defaults::AUTHORIZER);
    let installed = json_of(&server.run(&format!(
        "policies install {} --kind authorizer --name std --memory-mib 32 -o json",
        authz.display()
    )));
    assert_eq!(installed["budget"]["memoryBudgetMib"], 32);
    assert_eq!(installed["budget"]["decisions"], 200);
    assert_ok(&server.run("policies activate std@1"));

    // A version that asked for more than its budget: refused at install, naming the peak and
    // the budget.
    let bomb = write_temp("bomb.wasm", fixtures::BOMB);
    let err = failure(&server.run(&format!(
        "policies install {} --kind authorizer --name bomb --memory-mib 2",
        bomb.display()
    )));
    assert!(err.contains("peak memory "), "{err}");
    assert!(err.contains("exceeds the budget of 2 MiB"), "{err}");

    // Forced, last: active, the spinner refuses every decision, the operator's too.
    let forced = json_of(&server.run("policies activate spin@1 --force -o json"));
    assert_eq!(forced["activated"], "spin@1");
    assert_eq!(forced["forced"], true);
    assert!(forced["overBudget"].as_str().unwrap().contains("p99"));

    let mut conn = db.conn().await;
    let rows: Vec<(String, bool)> = sql_all!(
        &mut conn,
        (String, bool),
        "SELECT p.name, a.forced FROM policy_activations a JOIN policies p ON p.id = a.policy_id
         ORDER BY a.id"
    );
    assert_eq!(rows, [("std".into(), false), ("spin".into(), true)]);
    let (mib, p99): (i32, i64) = sql_one!(
        &mut conn,
        (i32, i64),
        "SELECT b.memory_budget_mib, b.p99_us FROM policy_budgets b
         JOIN policies p ON p.id = b.policy_id WHERE p.name = 'std'"
    );
    assert_eq!(mib, 32);
    assert!(p99 > 0 && p99 < 50_000, "{p99}");
}
