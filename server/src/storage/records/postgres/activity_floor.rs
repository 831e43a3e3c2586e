//! `tests/bench/pgbench-activity.sql`, the floor `GET activity` is measured against, must be the
//! statements the endpoint sends. It once fell behind them (the credential lookup gained the
//! user's disabled state and rotated secrets, the floor did not), which left the floor about
//! 20% cheaper than the endpoint's SQL; this test fails when the two part again.

use super::PostgresStore;
use crate::storage::records::sql::{audit::page_sql, tokens::credential_sql};

const FLOOR: &str = include_str!("../../../../../tests/bench/pgbench-activity.sql");

/// One space between words, none after `(` or before `)`, and pgbench's parameters written
/// the way the server binds them.
fn normalise(sql: &str) -> String {
    sql.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("( ", "(")
        .replace(" )", ")")
}

fn as_the_server_sends(floor_statement: &str) -> String {
    floor_statement
        .replace(":public_id", "$1")
        .replace(":ws", "$1")
        .replace("CAST(NULL AS BIGINT)", "CAST($2 AS BIGINT)")
        .replace("seq < NULL", "seq < $2")
        .replace("LIMIT 51", "LIMIT $3")
}

#[test]
fn the_activity_floor_runs_the_statements_the_endpoint_sends() {
    let without_comments = FLOOR
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    let floor: Vec<String> = without_comments
        .split(';')
        .map(normalise)
        .filter(|statement| !statement.is_empty())
        .map(|statement| as_the_server_sends(&statement))
        .collect();
    let server = [
        normalise(&credential_sql::<PostgresStore>()),
        normalise(&page_sql()),
    ];
    assert_eq!(
        floor, server,
        "tests/bench/pgbench-activity.sql has drifted from the endpoint"
    );
}
