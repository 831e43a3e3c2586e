//! `cpctl policies decisions` over HTTP: the decision log newest first, its filters, `-o json`,
//! and a one-line error (exit 2) for a bad `--since` or `--outcome`. Decisions are written
//! directly, as the server's background writer would; the server keeps none of its own allows.

use super::*;

/// A logged decision `age` ago under correlation id `cid`.
async fn decision(db: &Db, operation: &str, outcome: &str, age: chrono::Duration, cid: &str) {
    let reason = (outcome == "deny").then_some("the token lacks the scope activity:read");
    let mut conn = db.conn().await;
    sql_exec!(
        &mut conn,
        "INSERT INTO policy_decisions (occurred_at, kind, operation, outcome, reason,
             policy_name, policy_version, policy_digest, latency_us, correlation_id)
         VALUES ($1, 'authorizer', $2, $3, $4, 'built-in', 0, 'abc123', 42, $5)",
        chrono::Utc::now() - age,
        operation,
        outcome,
        reason,
        cid,
    );
}

fn cids(listed: &Value) -> Vec<&str> {
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["correlationId"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_listed_newest_first_and_filtered_from_the_cli() {
    let db = Db::new().await;
    let server = served_with(&db, |c| {
        c.policy_decision_sample = "0".parse().unwrap();
    })
    .await;
    decision(
        &db,
        "listActivity",
        "allow",
        chrono::Duration::hours(3),
        "cid-old-allow",
    )
    .await;
    decision(
        &db,
        "listActivity",
        "deny",
        chrono::Duration::hours(2),
        "cid-old-deny",
    )
    .await;
    decision(
        &db,
        "issueToken",
        "deny",
        chrono::Duration::minutes(10),
        "cid-new-deny",
    )
    .await;
    decision(
        &db,
        "listActivity",
        "allow",
        chrono::Duration::minutes(1),
        "cid-new-allow",
    )
    .await;

    let all = json_of(&server.run("policies decisions -o json"));
    assert_eq!(
        cids(&all),
        [
            "cid-new-allow",
            "cid-new-deny",
            "cid-old-deny",
            "cid-old-allow"
        ]
    );
    let first = &all[1];
    assert_eq!(first["policy"], "built-in@0");
    assert_eq!(first["policyDigest"], "abc123");
    assert_eq!(first["latencyMicros"], 42);
    assert_eq!(first["operation"], "issueToken");
    assert_eq!(first["reason"], "the token lacks the scope activity:read");
    assert!(
        is_api_time(first["occurredAt"].as_str().unwrap()),
        "{first}"
    );

    let recent = json_of(&server.run("policies decisions --since 1h -o json"));
    assert_eq!(cids(&recent), ["cid-new-allow", "cid-new-deny"]);
    let denies = json_of(&server.run("policies decisions --outcome deny -o json"));
    assert_eq!(cids(&denies), ["cid-new-deny", "cid-old-deny"]);
    let one = json_of(&server.run(
        "policies decisions --operation listActivity --outcome deny --since 2020-01-01T00:00:00Z -o json",
    ));
    assert_eq!(cids(&one), ["cid-old-deny"]);
    let limited = json_of(&server.run("policies decisions --limit 1 -o json"));
    assert_eq!(cids(&limited), ["cid-new-allow"]);

    let table = stdout(&server.run("policies decisions --outcome deny"));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("WHEN") && lines[0].contains("CORRELATION"),
        "{table}"
    );
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[1].contains("issueToken") && lines[1].contains("cid-new-deny"),
        "{table}"
    );

    let bad = server.run("policies decisions --since yesterday");
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        failure(&bad).contains("neither an RFC 3339 time nor a length of time"),
        "{}",
        stderr(&bad)
    );
    let bad = server.run("policies decisions --outcome denied");
    assert_eq!(bad.status.code(), Some(2));
    assert!(failure(&bad).contains("not an outcome"), "{}", stderr(&bad));
}
