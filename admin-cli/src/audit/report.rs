//! A verification report as `cpctl audit verify` prints it: the server's (`verification` of
//! `GET …/audit/verification`) or the offline check's, in the same JSON shape.

use serde_json::{Value, json};

use control_plane::service::audit_integrity::ChainReport;

use crate::cli::OutputFormat;

/// An offline report in the shape the server answers with.
pub fn of(report: &ChainReport) -> Value {
    json!({
        "workspaceId": report.workspace_id,
        "intact": report.intact(),
        "checkpointSequence": report.checkpoint_seq,
        "headSequence": report.head_seq,
        "headHash": report.head_hash,
        "verified": report.verified,
        "signedHeadSequence": report.signed_head_seq,
        "signedHeadsMatched": report.signed_heads_matched,
        "checkpoints": report.checkpoints,
        "anchorExtended": report.anchor_extended,
        "broken": report.broken.as_ref().map(|b| {
            let mut broken = json!({
                "problem": b.problem.as_str(),
                "sequence": b.sequence,
                "description": b.problem.describe(),
            });
            if let Some(at) = b.found_at {
                broken["foundAt"] = json!(at);
            }
            if let Some(kid) = &b.kid {
                broken["kid"] = json!(kid);
            }
            broken
        }),
    })
}

/// Prints the report, then fails (a one-line error, non-zero exit) when it is broken.
pub fn finish(out: OutputFormat, report: &Value) -> anyhow::Result<()> {
    print(out, report);
    let broken = &report["broken"];
    if !broken.is_null() {
        let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
        let described = match broken["kid"].as_str() {
            Some(kid) => format!("{}: key {kid}", text(&broken["description"])),
            None => text(&broken["description"]),
        };
        anyhow::bail!(
            "the audit chain of workspace {} is broken: {} at sequence {} ({described})",
            text(&report["workspaceId"]),
            text(&broken["problem"]),
            broken["sequence"],
        );
    }
    Ok(())
}

fn print(out: OutputFormat, report: &Value) {
    let int = |key: &str| report[key].as_i64().unwrap_or(0);
    match out {
        OutputFormat::Json => println!("{report}"),
        OutputFormat::Table => match report["broken"].as_object() {
            None => {
                let head = int("headSequence");
                println!(
                    "ok: {} events verified (sequences {} to {head}); head {head}:{}",
                    int("verified"),
                    int("checkpointSequence") + 1,
                    report["headHash"].as_str().unwrap_or("")
                );
                match report["signedHeadSequence"].as_i64() {
                    Some(seq) => println!(
                        "signed heads: {} matched, the latest at sequence {seq}",
                        int("signedHeadsMatched")
                    ),
                    None => println!(
                        "signed heads: none yet (the chain is only consistent with itself)"
                    ),
                }
                if report["anchorExtended"] == json!(true) {
                    println!("anchor: the log extends it");
                }
            }
            Some(broken) => {
                let problem = broken["problem"].as_str().unwrap_or("-");
                let moved = broken
                    .get("foundAt")
                    .and_then(Value::as_i64)
                    .map(|at| format!(" (now at sequence {at})"))
                    .unwrap_or_default();
                let what = match problem {
                    "changed" | "deleted" | "inserted" | "reordered" => format!("event {problem}"),
                    _ => broken["description"].as_str().unwrap_or(problem).to_owned(),
                };
                println!(
                    "broken: {what} at sequence {}{moved}; {} events verified before it",
                    broken["sequence"],
                    int("verified")
                )
            }
        },
    }
}
