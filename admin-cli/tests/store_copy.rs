//! `cpctl store copy`: a SQLite store populated through the real server and `cpctl` is copied
//! into an empty Postgres database, and a server on the copy answers every read as the original
//! did and carries on from it; a non-empty target is refused; an interrupted copy leaves the
//! target empty and can be run again. Those need Postgres and skip, with one line, without it
//! (a failure under `CP_TEST_REQUIRE_SERVICES=1`); a copy between SQLite files needs nothing.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use control_plane::config::ServerConfig;
use control_plane::startup::Application;
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

#[path = "../../tests/support/services.rs"]
mod services;

macro_rules! needs_postgres {
    () => {
        if !services::answers(&services::postgres_base()) {
            let at = services::address(&services::postgres_base());
            services::missing(&format!("Postgres at {at} does not answer"));
            services::skip(
                services::test_name!(),
                &format!(
                    "Postgres at {at} (not answering; start it, or point TEST_POSTGRES_URL at one)"
                ),
            );
            return;
        }
    };
}

// Declared after `needs_postgres!`; the tests use its helpers as their own.
#[path = "store_copy/support.rs"]
mod support;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_populated_sqlite_store_reads_back_the_same_from_its_postgres_copy() {
    needs_postgres!();
    let dir = TempDir::new();
    let src = dir.url("control-plane.db");

    // Admin records through cpctl: bootstrap on the file, the rest over HTTP to a server on it.
    let boot = json_of(
        &src,
        &[
            "bootstrap",
            "--org",
            "acme",
            "--workspace",
            "prod",
            "--admin",
            "ops@acme.test",
        ],
    );
    let org = boot["organisationId"].as_str().unwrap().to_owned();
    let ws = boot["workspaceId"].as_str().unwrap().to_owned();
    let user = boot["userId"].as_str().unwrap().to_owned();
    let token = boot["credential"]["token"].as_str().unwrap().to_owned();
    let token_id = boot["credential"]["id"].as_str().unwrap().to_owned();
    let source = Server::start(&src).await;
    let http = |args: &[&str]| remote_json(&source, &token, args);
    let ws2 = id(&http(&["workspaces", "create", "staging"]));
    let env = id(&http(&["environments", "create", "--workspace", &ws, "eu"]));
    let env2 = id(&http(&[
        "environments",
        "create",
        "--workspace",
        &ws2,
        "us",
    ]));
    let user2 = id(&http(&["users", "create", "dev@acme.test"]));
    let issue_for = |user: &str, name: &str, rest: &[&str]| {
        let args = [
            &["tokens", "issue", "--user", user, "--name", name][..],
            rest,
        ]
        .concat();
        http(&args)["token"].as_str().unwrap().to_owned()
    };
    let reporter = issue_for(
        &user2,
        "reporter",
        &["--scope", "reviews:report", "--workspace", &ws],
    );
    let staging = issue_for(
        &user,
        "staging",
        &[
            "--scope",
            "activity:read",
            "--scope",
            "audit:read",
            "--workspace",
            &ws2,
            "--environment",
            &env2,
        ],
    );
    http(&["pools", "create", "--workspace", &ws2, "staging-pool"]);
    let pool = id(&http(&["pools", "create", "--workspace", &ws, "builders"]));
    let runner = http(&["runners", "register", "--pool", &pool]);
    let runner_id = runner["runnerId"].as_str().unwrap().to_owned();
    let key_id = runner["keyId"].as_str().unwrap().to_owned();
    let private = runner["privateKey"].as_str().unwrap().to_owned();
    http(&["runners", "keys", "add", "--runner", &runner_id]);
    let workflow = id(&http(&[
        "workflows",
        "create",
        "--workspace",
        &ws,
        "deploy",
    ]));
    let revision = id(&http(&[
        "workflows",
        "revisions",
        "create",
        "--workflow",
        &workflow,
    ]));
    let plugin = id(&http(&["plugins", "create", "--org", &org, "linter"]));
    let std_policy = write_temp(
        &dir,
        "std.wasm",
        control_plane::policy::defaults::AUTHORIZER,
    );
    let deny = write_temp(&dir, "deny.wasm", control_plane::policy::fixtures::DENY_ALL);
    for args in [
        vec![
            "policies",
            "install",
            &std_policy,
            "--kind",
            "authorizer",
            "--name",
            "std",
        ],
        vec!["policies", "activate", "std@1"],
        vec!["policies", "rollback", "authorizer"],
        vec!["policies", "activate", "std@1"],
        vec![
            "policies",
            "install",
            &deny,
            "--kind",
            "authorizer",
            "--name",
            "deny",
        ],
        vec!["policies", "shadow", "deny@1"],
    ] {
        http(&args);
    }

    // The rest through the API.
    let issue = |name: &str| json!({"name": name, "scopes": ["activity:read"], "organisationId": org, "workspaceIds": [ws]});
    let child = source
        .post("/v1/personal-access-tokens", &token, &issue("ci"))
        .await;
    let child = child["credential"]["token"].as_str().unwrap().to_owned();
    let doomed = source
        .post("/v1/personal-access-tokens", &token, &issue("doomed"))
        .await;
    let doomed_id = doomed["credential"]["id"].as_str().unwrap().to_owned();
    let doomed = doomed["credential"]["token"].as_str().unwrap().to_owned();
    let (status, _) = source
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/workspaces/{ws}/access-tokens/{doomed_id}"),
            &token,
            Some(&json!({"reason": "rotated"})),
        )
        .await;
    assert_eq!(status, 200);
    let command = source
        .post(
            &format!("/v1/workspaces/{ws}/runner-commands"),
            &token,
            &json!({"poolId": pool, "command": "deploy", "args": ["--tag", "v1.2.3"], "environmentId": env}),
        )
        .await;
    let delivery = command["command"]["deliveryId"]
        .as_str()
        .unwrap()
        .to_owned();
    let report_body = r#"{"status":"received"}"#;
    let signed = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args([
            "runners",
            "sign",
            "--runner",
            &runner_id,
            "--key",
            &key_id,
            "--delivery",
            &delivery,
        ])
        .args(["--body", report_body, "-o", "json"])
        .env("CP_RUNNER_PRIVATE_KEY", &private)
        .output()
        .unwrap();
    let signed: Value = serde_json::from_slice(&ok(signed).stdout).unwrap();
    let mut report = source
        .client
        .post(format!(
            "{}{}",
            source.base,
            signed["path"].as_str().unwrap()
        ))
        .header("content-type", "application/json")
        .body(report_body);
    for (name, value) in signed["headers"].as_object().unwrap() {
        report = report.header(name.as_str(), value.as_str().unwrap());
    }
    let report = report.send().await.unwrap();
    assert_eq!(report.status(), 200, "{}", report.text().await.unwrap());
    source
        .post(
            &format!(
                "/v1/workspaces/{ws}/workflows/{workflow}/revisions/{revision}/request-approval"
            ),
            &token,
            &json!({"comment": "ship it"}),
        )
        .await;
    let (status, review) = source
        .call(
            reqwest::Method::PUT,
            &format!("/v1/marketplace/plugins/{plugin}/reviews/me"),
            &token,
            Some(&json!({"rating": 4, "title": "Solid", "body": "Catches what it should."})),
        )
        .await;
    assert_eq!(status, 200, "{review}");
    let review_id = review["review"]["id"].as_str().unwrap().to_owned();
    source
        .post(
            &format!("/v1/marketplace/plugins/{plugin}/reviews/{review_id}/report"),
            &reporter,
            &json!({"reason": "spam", "comment": "an advert"}),
        )
        .await;
    // The shadow policy disagrees with every allowed request once the server has picked it up.
    let mut disagreements = 0;
    for _ in 0..200 {
        source
            .get(&format!("/v1/workspaces/{ws}/activity"), &child)
            .await;
        disagreements = http(&["policies", "shadow-report"])
            .as_array()
            .map_or(0, Vec::len);
        if disagreements > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(disagreements > 0, "the shadow recorded no disagreement");

    let before = reads(&source, &token, &ws).await;
    let before_staging = reads(&source, &staging, &ws2).await;
    let (doomed_status, doomed_body) = source
        .get(&format!("/v1/workspaces/{ws}/activity"), &doomed)
        .await;
    assert_ne!(doomed_status, 200, "{doomed_body}");
    let listed = http_listings(&source, &token, &token_id, &ws, &plugin);
    source.stop().await;

    let db = PgDb::new(true).await;
    let copied = store_copy(&src, &db.url);
    let copied: Value = serde_json::from_slice(&ok(copied).stdout).unwrap();
    let rows = |table: &str| {
        copied["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["table"] == table)
            .and_then(|t| t["rows"].as_u64())
            .unwrap_or_else(|| panic!("no {table} in {copied}"))
    };
    // Every table the populated store fills came across.
    for (table, count) in db.counts().await {
        assert!(count > 0, "{table} is empty in the copy");
        assert_eq!(rows(table), count as u64, "{table}");
    }
    assert_eq!(copied["workspacesVerified"], 2);

    // A server on the copy lists the same records.
    let target = Server::start(&db.url).await;
    assert_eq!(
        http_listings(&target, &token, &token_id, &ws, &plugin),
        listed
    );
    // Identical answers: the original token's hash came across, and so did every event.
    assert_eq!(reads(&target, &token, &ws).await, before);
    assert_eq!(reads(&target, &staging, &ws2).await, before_staging);
    let (status, _) = target
        .get(&format!("/v1/workspaces/{ws}/activity"), &child)
        .await;
    assert_eq!(status, 200, "a token issued over the API authenticates");
    let (status, body) = target
        .get(&format!("/v1/workspaces/{ws}/activity"), &doomed)
        .await;
    assert_eq!(
        (status, &body["error"]),
        (doomed_status, &doomed_body["error"]),
        "the revoked token stays revoked"
    );

    // The next event continues the workspace's sequence, in the log and on the stream.
    let last = before[0]["items"][0]["sequence"].as_i64().unwrap();
    target
        .post(
            "/v1/personal-access-tokens",
            &token,
            &issue("after-the-move"),
        )
        .await;
    let (_, page) = target
        .get(&format!("/v1/workspaces/{ws}/activity?limit=1"), &token)
        .await;
    assert_eq!(page["items"][0]["sequence"], last + 1, "{page}");
    assert_eq!(page["items"][0]["type"], "token.issued");
    let resumed = target
        .stream(
            &format!("/v1/workspaces/{ws}/audit/stream"),
            &token,
            Some(last),
            1,
        )
        .await;
    assert_eq!(resumed[0].0, last + 1);

    // The hash chain came across and goes on: SQLite's JSON text became jsonb, and the chain
    // hashes the event as read, so it verifies to the event written after the move.
    let http = |args: &[&str]| remote_json(&target, &token, args);
    let verified = http(&["audit", "verify", "--workspace", &ws]);
    assert_eq!(verified["intact"], true, "{verified}");
    assert_eq!(verified["verified"], last + 1, "{verified}");

    // Serial ids continue after the copied ones: a new activation is a new row.
    http(&["policies", "rollback", "authorizer"]);
    http(&["policies", "activate", "std@1"]);
    http(&["policies", "rollback", "authorizer"]);
    let listed_pg = http_listings(&target, &token, &token_id, &ws, &plugin);
    target.stop().await;

    // And back: the copy copies into a new SQLite file, which lists the same.
    let back = dir.url("back.db");
    ok(store_copy(&db.url, &back));
    let served = Server::start(&back).await;
    assert_eq!(
        http_listings(&served, &token, &token_id, &ws, &plugin),
        listed_pg
    );
    let verified = remote_json(&served, &token, &["audit", "verify", "--workspace", &ws]);
    assert_eq!(verified["intact"], true, "{verified}");
    served.stop().await;
    db.drop_db().await;
}

#[tokio::test]
async fn a_target_with_records_is_refused_and_left_as_it_was() {
    needs_postgres!();
    let dir = TempDir::new();
    let src = dir.url("control-plane.db");
    json_of(
        &src,
        &[
            "bootstrap",
            "--org",
            "acme",
            "--workspace",
            "prod",
            "--admin",
            "ops@acme.test",
        ],
    );
    let db = PgDb::new(true).await;
    let here = json_of(
        &db.url,
        &[
            "bootstrap",
            "--org",
            "already-here",
            "--workspace",
            "w",
            "--admin",
            "ops@here.test",
        ],
    );
    let before = db.counts().await;

    let out = store_copy(&src, &db.url);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one-line error: {err}");
    assert!(err.contains("not empty"), "{err}");
    assert!(!err.contains(&db.url), "the URL may hold a password: {err}");
    assert_eq!(db.counts().await, before, "nothing was written");
    let server = Server::start(&db.url).await;
    let orgs = remote_json(
        &server,
        here["credential"]["token"].as_str().unwrap(),
        &["orgs", "list"],
    );
    server.stop().await;
    assert_eq!(orgs.as_array().unwrap().len(), 1);
    assert_eq!(orgs[0]["name"], "already-here");
    db.drop_db().await;
}

#[tokio::test]
async fn an_interrupted_copy_leaves_the_target_empty_and_a_rerun_completes_it() {
    needs_postgres!();
    let dir = TempDir::new();
    let src = dir.url("control-plane.db");
    let boot = json_of(
        &src,
        &[
            "bootstrap",
            "--org",
            "acme",
            "--workspace",
            "prod",
            "--admin",
            "ops@acme.test",
        ],
    );
    let ws = boot["workspaceId"].as_str().unwrap().to_owned();
    let token = boot["credential"]["token"].as_str().unwrap().to_owned();
    let source = Server::start(&src).await;
    remote_json(
        &source,
        &token,
        &["pools", "create", "--workspace", &ws, "builders"],
    );
    source.stop().await;
    // Not created: the copy creates the database, as the server does.
    let db = PgDb::new(false).await;

    // Killed after the audit log and half the tables, mid-transaction.
    let crashed = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args(["store", "copy", "--from", &src, "--to", &db.url])
        .env("CP_STORE_COPY_CRASH_AFTER_TABLES", "12")
        .output()
        .unwrap();
    assert!(!crashed.status.success(), "the copy was interrupted");
    assert!(
        db.counts().await.iter().all(|(_, n)| *n == 0),
        "an interrupted copy leaves the target empty: {:?}",
        db.counts().await
    );

    let out = ok(cpctl(
        "",
        &["store", "copy", "--from", &src, "--to", &db.url],
    ));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("audit_events"), "{summary}");
    assert!(summary.contains("verified"), "{summary}");
    let target = Server::start(&db.url).await;
    let pools = remote_json(&target, &token, &["pools", "list", "--workspace", &ws]);
    target.stop().await;
    assert_eq!(pools[0]["name"], "builders");
    db.drop_db().await;
}

/// The guard for Postgres (the SQLite schema's is a unit test of `storage::copy`): the copy
/// checks both schemas against its list of tables, so a freshly migrated store copies only if
/// every table a migration creates is copied or deliberately not.
#[tokio::test]
async fn every_table_of_both_schemas_is_copied_or_deliberately_not() {
    needs_postgres!();
    let dir = TempDir::new();
    let db = PgDb::new(true).await;
    let out = store_copy(&dir.url("empty.db"), &db.url);
    let copied: Value = serde_json::from_slice(&ok(out).stdout).unwrap();
    let tables: Vec<&str> = copied["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["table"].as_str().unwrap())
        .collect();
    for table in RECORD_TABLES {
        assert!(tables.contains(table), "{table} not copied");
    }
    assert_eq!(
        copied["rows"], 1,
        "only policy_state's seeded row: {copied}"
    );
    db.drop_db().await;
}

/// Without any service: an embedded store copies into another SQLite file, which lists the
/// same records (from the file and from a server on it), and a second copy into it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_store_copies_into_another_file() {
    let dir = TempDir::new();
    let src = dir.url("control-plane.db");
    let boot = json_of(
        &src,
        &[
            "bootstrap",
            "--org",
            "acme",
            "--workspace",
            "prod",
            "--admin",
            "ops@acme.test",
        ],
    );
    let ws = boot["workspaceId"].as_str().unwrap().to_owned();
    let org = boot["organisationId"].as_str().unwrap().to_owned();
    let (token, token_id) = (&boot["credential"]["token"], &boot["credential"]["id"]);
    let (token, token_id) = (token.as_str().unwrap(), token_id.as_str().unwrap());
    let source = Server::start(&src).await;
    let http = |args: &[&str]| remote_json(&source, token, args);
    http(&["pools", "create", "--workspace", &ws, "builders"]);
    http(&["workflows", "create", "--workspace", &ws, "deploy"]);
    let plugin = id(&http(&["plugins", "create", "--org", &org, "linter"]));
    source.stop().await;
    let copy = dir.url("moved/copy.db");

    let out = ok(store_copy(&src, &copy));
    let copied: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(copied["workspacesVerified"], 1, "{copied}");
    // It says which key-encryption key the target's server needs.
    let needs = copied["targetNeeds"].as_str().unwrap();
    assert!(needs.contains(&key_file().display().to_string()), "{needs}");
    let mut listed = Vec::new();
    for store in [&src, &copy] {
        let server = Server::start(store).await;
        listed.push(http_listings(&server, token, token_id, &ws, &plugin));
        server.stop().await;
    }
    assert_eq!(listed[0], listed[1]);
    // The copy holds the same secrets: a folder and files of its owner's alone.
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let moved = dir.0.join("moved");
        assert_eq!(mode(&moved), 0o700);
        for entry in std::fs::read_dir(&moved).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }

    let again = store_copy(&src, &copy);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
}
