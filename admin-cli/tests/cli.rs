//! Runs the real `cpctl` binary against a fresh records store of its own: a Postgres database,
//! or an SQLite file with `TEST_RECORDS=sqlite` (or when Postgres does not answer), chosen once
//! per run as the HTTP suite chooses (`cli/records.rs`). The verbs that open the store run with
//! `DATABASE_URL` ([`Db::run`]); those that go over HTTP run against a server on the same store
//! ([`Served::run`], `cli/served.rs`). This file holds what the tests share (`cpctl` run as one
//! line, output checks); the tests are in `cli/`, one module a concern.

use std::process::{Command, Output};

use control_plane::domain::RunnerSecret;
use serde_json::Value;

#[path = "../../tests/support/services.rs"]
mod services;

#[path = "cli/records.rs"]
mod records;

use records::{Backend, Db, sql_all, sql_exec, sql_one};

#[path = "cli/served.rs"]
mod served;

use served::{Served, client, config_home, serve, served, served_with};

impl Db {
    /// `cpctl` on the store with `line` split at whitespace (no argument of these tests holds a
    /// space).
    fn run(&self, line: &str) -> Output {
        self.cpctl(&line.split_whitespace().collect::<Vec<_>>())
    }

    fn cpctl(&self, args: &[&str]) -> Output {
        self.cpctl_with_key(args, None)
    }

    fn cpctl_with_key(&self, args: &[&str], key: Option<&str>) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cpctl"));
        command
            .args(args)
            .env("DATABASE_URL", &self.url)
            .env_remove("CP_TOKEN_HASH_KEY")
            .env_remove("CP_DELIVERY_HTTP_HOSTS")
            .env_remove("CP_DEV");
        if let Some(key) = key {
            command.env("CP_TOKEN_HASH_KEY", key);
        }
        command.output().unwrap()
    }
}

/// RFC 3339, UTC `Z`, six fraction digits: `dddd-dd-ddTdd:dd:dd.ddddddZ`.
fn is_api_time(s: &str) -> bool {
    const TEMPLATE: &[u8] = b"dddd-dd-ddTdd:dd:dd.ddddddZ";
    s.len() == TEMPLATE.len()
        && s.bytes().zip(TEMPLATE).all(|(c, &t)| match t {
            b'd' => c.is_ascii_digit(),
            _ => c == t,
        })
}

/// Asserts that `cpctl` succeeded, showing its stderr when it did not.
fn assert_ok(o: &Output) {
    assert!(o.status.success(), "{}", stderr(o));
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write_temp(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("{}-{name}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn cases(kind: &str) -> String {
    format!(
        "{}/../policies/{kind}/cases.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `cpctl bootstrap` of organisation `acme`, workspace `prod`, as JSON.
fn bootstrap(db: &Db) -> Value {
    json_of(&db.run("bootstrap --org acme --workspace prod --admin ops@acme.test -o json"))
}

fn json_of(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "cpctl failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Moves a revision to `pending_approval` as the API's request would.
async fn pending(db: &Db, revision: &str, by: &str) {
    let changed = sql_exec!(
        &mut db.conn().await,
        "UPDATE workflow_revisions SET state = 'pending_approval', requested_by = $2,
             requested_at = $3
         WHERE id = $1",
        revision.parse::<uuid::Uuid>().unwrap(),
        by.parse::<uuid::Uuid>().unwrap(),
        chrono::Utc::now(),
    );
    assert_eq!(changed, 1, "revision {revision}");
}

/// A JSON column read as text (`CAST(data AS TEXT)`, the one way both backends give it).
fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn failure(o: &Output) -> String {
    assert!(!o.status.success(), "cpctl succeeded: {}", stdout(o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.trim().lines().count(), 1, "one-line error: {err}");
    err
}

// The tests, by concern.
#[path = "cli/audit.rs"]
mod audit;
#[path = "cli/audit_proofs.rs"]
mod audit_proofs;
#[path = "cli/decisions.rs"]
mod decisions;
#[path = "cli/fleet.rs"]
mod fleet;
#[path = "cli/http_verbs.rs"]
mod http_verbs;
#[path = "cli/login.rs"]
mod login;
#[path = "cli/marketplace.rs"]
mod marketplace;
#[path = "cli/offboarding.rs"]
mod offboarding;
#[path = "cli/policies.rs"]
mod policies;
#[path = "cli/policy_budgets.rs"]
mod policy_budgets;
#[path = "cli/policy_decisions.rs"]
mod policy_decisions;
#[path = "cli/policy_new.rs"]
mod policy_new;
#[path = "cli/resources.rs"]
mod resources;
#[path = "cli/setup.rs"]
mod setup;
#[path = "cli/store_verbs.rs"]
mod store_verbs;
#[path = "cli/tokens.rs"]
mod tokens;
