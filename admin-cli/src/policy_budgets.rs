//! `cpctl policies test | bench`: print what the server crate's case runner, coverage rule and
//! budget measurement found, locally (no server, no store); the rules live there. `install`
//! is the server's (`policies.rs`): it measures with its own settings.

use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};

use control_plane::config::ServerConfig;
use control_plane::policy::{
    BudgetReport, Coverage, DEFAULT_RUNS, EngineSettings, MemoryBudget, PolicyEngine, PolicyKind,
    measure, run_cases,
};
use std::time::Duration;

use crate::cli::OutputFormat;

/// `--memory-mib`: 1 to the engine's ceiling; anything else is bad input (exit 2).
pub fn parse_memory_mib(raw: &str) -> Result<MemoryBudget, String> {
    let mib = raw
        .parse::<u64>()
        .map_err(|_| format!("expected a number of MiB, not {raw:?}"))?;
    MemoryBudget::from_mib(mib)
}

fn kind(raw: &str) -> anyhow::Result<PolicyKind> {
    PolicyKind::parse(raw).map_err(anyhow::Error::msg)
}

/// An engine for decisions outside the server, under the budgets the server would read from
/// its environment (`CP_POLICY_DEADLINE_MS`, `CP_POLICY_MEMORY_MIB`).
fn engine() -> anyhow::Result<std::sync::Arc<PolicyEngine>> {
    let config = ServerConfig::for_database("");
    PolicyEngine::new(EngineSettings {
        deadline: Duration::from_millis(config.policy_deadline_ms),
        memory_bytes: config.policy_memory_mib << 20,
        max_concurrent: 1,
        cache_dir: native_cache_dir(&config),
        ..EngineSettings::default()
    })
    .map_err(anyhow::Error::msg)
}

/// Where cpctl keeps compiled policies: `CP_POLICY_CACHE_DIR` when set, else the user's cache
/// directory, so a second `policies test` of an 18 MB component loads in a second instead of
/// compiling for minutes, and no command writes into the directory it is run from.
fn native_cache_dir(config: &ServerConfig) -> Option<std::path::PathBuf> {
    if std::env::var_os("CP_POLICY_CACHE_DIR").is_some() {
        return Some(config.policy_cache_dir());
    }
    std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".cache")))
        .map(|dir| dir.join("cpctl").join("policy-cache"))
}

fn read_cases(cases: Option<&Path>) -> anyhow::Result<Option<String>> {
    cases
        .map(|path| {
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
        })
        .transpose()
}

/// `policies test FILE --cases F [--require-coverage]`: each case, then what they cover.
pub async fn test(
    out: OutputFormat,
    file: &Path,
    cases: &Path,
    kind_name: &str,
    require_coverage: bool,
) -> anyhow::Result<()> {
    let kind = kind(kind_name)?;
    let component =
        std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let cases = std::fs::read_to_string(cases)
        .with_context(|| format!("cannot read {}", cases.display()))?;
    let results = run_cases(&*engine()?, kind, &component, &cases)
        .await
        .map_err(anyhow::Error::msg)?;
    let failed = results.iter().filter(|r| !r.passed()).count();
    let coverage = Coverage::of(kind, &results);
    match out {
        OutputFormat::Json => println!(
            "{}",
            json!({
                "cases": results
                    .iter()
                    .map(|r| json!({ "name": r.name, "expected": r.expected, "actual": r.actual, "passed": r.passed() }))
                    .collect::<Vec<_>>(),
                "coverage": coverage_json(&coverage),
                "complete": coverage.complete(),
            })
        ),
        OutputFormat::Table => {
            let width = results
                .iter()
                .map(|r| r.name.chars().count())
                .max()
                .unwrap_or(4)
                .max(4);
            println!(
                "{:<6}  {:<width$}  {:<16}  ACTUAL",
                "RESULT", "CASE", "EXPECTED"
            );
            for r in &results {
                let mark = if r.passed() { "pass" } else { "FAIL" };
                println!(
                    "{mark:<6}  {:<width$}  {:<16}  {}",
                    r.name, r.expected, r.actual
                );
            }
            println!("{} passed, {failed} failed\n", results.len() - failed);
            coverage_table(&coverage);
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} cases did not match", results.len());
    }
    if require_coverage && let Some(missing) = coverage.missing_line() {
        anyhow::bail!("{missing}");
    }
    Ok(())
}

fn coverage_json(coverage: &Coverage) -> Value {
    Value::Array(
        coverage
            .rows
            .iter()
            .map(|row| {
                let mut o = serde_json::Map::new();
                let key = match coverage.kind {
                    PolicyKind::Authorizer => "operation",
                    PolicyKind::Moderator => "verdict",
                };
                o.insert(key.into(), row.subject.clone().into());
                for (column, n) in &row.counts {
                    o.insert((*column).into(), (*n).into());
                }
                o.insert("missing".into(), json!(row.missing));
                Value::Object(o)
            })
            .collect(),
    )
}

fn coverage_table(coverage: &Coverage) {
    let Some(first) = coverage.rows.first() else {
        return;
    };
    let head = match coverage.kind {
        PolicyKind::Authorizer => "OPERATION",
        PolicyKind::Moderator => "VERDICT",
    };
    let width = coverage
        .rows
        .iter()
        .map(|r| r.subject.len())
        .max()
        .unwrap_or(0)
        .max(head.len());
    let columns: Vec<String> = first
        .counts
        .iter()
        .map(|(c, _)| format!("{:<8}", c.to_uppercase()))
        .collect();
    println!("{head:<width$}  {}  COVERED", columns.join("  "));
    for row in &coverage.rows {
        let counts: Vec<String> = row.counts.iter().map(|(_, n)| format!("{n:<8}")).collect();
        let covered = if row.complete() {
            "yes".to_owned()
        } else {
            format!("NO: no {}", row.missing.join(", no "))
        };
        println!("{:<width$}  {}  {covered}", row.subject, counts.join("  "));
    }
    match coverage.missing_line() {
        Some(missing) => println!("{missing}"),
        None => println!("coverage complete"),
    }
}

fn budget_json(b: &BudgetReport) -> Value {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    json!({
        "decisions": b.decisions,
        "failures": b.failures,
        "p50Ms": ms(b.p50),
        "p99Ms": ms(b.p99),
        "maxMs": ms(b.max),
        "deadlineMs": b.deadline.as_millis() as u64,
        "peakMemoryBytes": b.peak_memory_bytes,
        "memoryBudgetMib": b.memory_budget.mib(),
        "overBudget": b.over_budget(),
    })
}

/// `policies bench FILE --kind K [--cases F] [--memory-mib N]`: measures without installing.
pub async fn bench(
    out: OutputFormat,
    file: &Path,
    kind_name: &str,
    cases: Option<&Path>,
    memory: Option<MemoryBudget>,
) -> anyhow::Result<()> {
    let kind = kind(kind_name)?;
    let component =
        std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let cases = read_cases(cases)?;
    let engine = engine()?;
    let memory = memory.unwrap_or_else(|| MemoryBudget::server_default(engine.settings()));
    let engine_ref = engine.clone();
    // Guest code runs inside `poll`: the measurement gets a thread of its own.
    let report = tokio::task::spawn_blocking(move || {
        tokio::runtime::Handle::current().block_on(measure(
            &engine_ref,
            kind,
            &component,
            cases.as_deref(),
            memory,
            DEFAULT_RUNS,
        ))
    })
    .await?
    .map_err(anyhow::Error::msg)?;
    match out {
        OutputFormat::Json => println!("{}", budget_json(&report)),
        OutputFormat::Table => {
            println!("{} decisions: {}", report.decisions, report.summary());
            if let Some(reason) = report.over_budget() {
                println!("over budget: {reason}");
            }
        }
    }
    Ok(())
}
