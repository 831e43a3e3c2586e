//! Runs the real `cpctl` binary against a fresh Postgres database. Tests that need Postgres say
//! so with `needs_postgres!()` and skip, with one line, when it does not answer (they fail
//! instead under `CP_TEST_REQUIRE_SERVICES=1`); the rest need no service.

use std::process::{Command, Output};

use control_plane::domain::RunnerSecret;
use serde_json::Value;
use sqlx::{Connection, Executor, PgConnection};

struct Db {
    name: String,
    url: String,
}

#[path = "../../tests/support/services.rs"]
mod services;

use services::postgres_base as base;

/// `needs_postgres!();` at the top of a test: returns from it, with one line saying so, when
/// the test Postgres does not answer (a failure instead under `CP_TEST_REQUIRE_SERVICES=1`).
macro_rules! needs_postgres {
    () => {
        if !postgres_answers(services::test_name!()) {
            return;
        }
    };
}

fn postgres_answers(test: &str) -> bool {
    if services::answers(&base()) {
        return true;
    }
    let at = services::address(&base());
    services::missing(&format!("Postgres at {at} does not answer"));
    services::skip(
        test,
        &format!("Postgres at {at} (not answering; start it, or point TEST_POSTGRES_URL at one)"),
    );
    false
}

impl Db {
    async fn new() -> Self {
        let name = format!("cp_cli_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&format!("{}/postgres", base()))
            .await
            .unwrap();
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap();
        Self {
            url: format!("{}/{name}", base()),
            name,
        }
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

    async fn drop_db(self) {
        let mut admin = PgConnection::connect(&format!("{}/postgres", base()))
            .await
            .unwrap();
        let _ = admin
            .execute(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            )))
            .await;
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

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn bootstrap_prints_ids_and_a_credential_once_and_refuses_a_second_time() {
    needs_postgres!();
    let db = Db::new().await;
    let out = db.cpctl(&[
        "bootstrap",
        "--org",
        "acme",
        "--workspace",
        "prod",
        "--admin",
        "ops@acme.test",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    for key in ["organisationId", "workspaceId", "userId"] {
        assert!(
            v[key]
                .as_str()
                .is_some_and(|s| uuid::Uuid::parse_str(s).is_ok()),
            "{key}"
        );
    }
    let credential = &v["credential"];
    assert_eq!(
        credential["scopes"].as_array().unwrap().len(),
        9,
        "every scope"
    );
    assert_eq!(credential["workspaceIds"][0], v["workspaceId"]);
    assert!(credential["token"].as_str().unwrap().starts_with("cpat_"));
    // The API's one time format (docs/decisions.md, "Times").
    for key in ["createdAt", "expiresAt"] {
        let at = credential[key].as_str().unwrap();
        assert!(is_api_time(at), "{key} = {at}");
    }

    let again = db.cpctl(&[
        "bootstrap",
        "--org",
        "acme",
        "--workspace",
        "prod",
        "--admin",
        "ops@acme.test",
    ]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one-line error: {err}");
    assert!(err.contains("already exists"), "{err}");
    db.drop_db().await;
}

/// After the credential, bootstrap prints (stdout only) a `curl` of the workspace's activity
/// with the new token, the `/docs` address built from the listen address, and a `cpctl` line
/// for an activity-only token that works as printed.
#[tokio::test]
async fn bootstrap_prints_first_steps_with_the_new_token() {
    needs_postgres!();
    let db = Db::new().await;
    let out = db.cpctl(&[
        "bootstrap",
        "--org",
        "acme",
        "--workspace",
        "prod",
        "--admin",
        "ops@acme.test",
        "--listen",
        "0.0.0.0:9090",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let value = |label: &str| -> String {
        let line = text.lines().find(|l| l.starts_with(label)).unwrap();
        line[label.len()..].trim().to_owned()
    };
    let (workspace, user, token) = (value("workspace:"), value("user:"), value("token:"));
    assert!(token.starts_with("cpat_"), "{text}");
    let curl = format!(
        "curl -s http://localhost:9090/v1/workspaces/{workspace}/activity \
         -H 'Authorization: Bearer {token}'"
    );
    assert!(text.contains(&curl), "{text}");
    assert!(text.contains("http://localhost:9090/docs"), "{text}");
    let issue = format!(
        "DATABASE_URL=... cpctl tokens issue --user {user} --name activity-reader \
         --scope activity:read --workspace {workspace}"
    );
    assert!(text.contains(&issue), "{text}");
    assert!(
        !text.contains(&db.url),
        "the database URL may hold a password"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains(&token),
        "token on stderr"
    );

    // The cpctl line works as printed (DATABASE_URL is set here).
    let args: Vec<&str> = issue.split_whitespace().skip(2).collect();
    let issued = json_of(&db.cpctl(&[&args[..], &["-o", "json"]].concat()));
    assert_eq!(issued["scopes"], serde_json::json!(["activity:read"]));
    db.drop_db().await;
}

#[tokio::test]
async fn create_prints_the_id_and_list_shows_it() {
    needs_postgres!();
    let db = Db::new().await;
    let org = stdout(&db.cpctl(&["orgs", "create", "globex"]))
        .trim()
        .to_owned();
    assert!(uuid::Uuid::parse_str(&org).is_ok(), "{org}");
    let ws = db.cpctl(&[
        "workspaces",
        "create",
        "--org",
        &org,
        "staging",
        "-o",
        "json",
    ]);
    let ws: Value = serde_json::from_str(&stdout(&ws)).unwrap();
    assert_eq!(ws["name"], "staging");
    let ws_id = ws["id"].as_str().unwrap();
    let env = stdout(&db.cpctl(&["environments", "create", "--workspace", ws_id, "eu"]))
        .trim()
        .to_owned();
    assert!(uuid::Uuid::parse_str(&env).is_ok());
    let user = stdout(&db.cpctl(&["users", "create", "--org", &org, "dev@globex.test"]))
        .trim()
        .to_owned();
    let issued = db.cpctl(&[
        "tokens",
        "issue",
        "--user",
        &user,
        "--name",
        "deploy",
        "--scope",
        "activity:read",
        "--workspace",
        ws_id,
        "--environment",
        &env,
        "-o",
        "json",
    ]);
    assert!(
        issued.status.success(),
        "{}",
        String::from_utf8_lossy(&issued.stderr)
    );
    let issued: Value = serde_json::from_str(&stdout(&issued)).unwrap();
    assert_eq!(issued["environmentIds"][0], env.as_str());

    let list: Value =
        serde_json::from_str(&stdout(&db.cpctl(&["tokens", "list", "-o", "json"]))).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert!(
        !list.to_string().contains(issued["token"].as_str().unwrap()),
        "listings never show a secret"
    );
    let table = stdout(&db.cpctl(&["orgs", "list"]));
    assert!(table.starts_with("ID") && table.contains("globex"));

    let revoked = db.cpctl(&[
        "tokens",
        "revoke",
        "--token",
        issued["id"].as_str().unwrap(),
        "--workspace",
        ws_id,
        "--reason",
        "done",
    ]);
    assert!(revoked.status.success());
    assert!(stdout(&revoked).contains("revoked entirely"));
    let bad = db.cpctl(&[
        "tokens",
        "issue",
        "--user",
        &user,
        "--name",
        "x",
        "--scope",
        "nope",
        "--workspace",
        ws_id,
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown scope"));
    db.drop_db().await;
}

#[test]
fn completion_scripts_are_generated() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(env!("CARGO_BIN_EXE_cpctl"))
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("cpctl"),
            "{shell}"
        );
    }
}

#[test]
fn without_a_database_url_the_embedded_store_in_the_data_dir_is_used() {
    let dir = std::env::temp_dir().join(format!("cp-cli-{}", uuid::Uuid::new_v4().simple()));
    let cpctl = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cpctl"))
            .args(args)
            .arg("--data-dir")
            .arg(&dir)
            .env_remove("DATABASE_URL")
            .env_remove("CP_TOKEN_HASH_KEY")
            .output()
            .unwrap()
    };
    let created = cpctl(&["orgs", "create", "embedded-org"]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    assert!(dir.join("control-plane.db").exists());
    let listed = cpctl(&["orgs", "list", "-o", "json"]);
    let orgs: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(orgs[0]["name"], "embedded-org");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unusable_store_is_a_one_line_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args([
            "orgs",
            "list",
            "--database-url",
            "sqlite:///proc/cp-cannot-live-here/x.db",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("/proc/cp-cannot-live-here"), "{err}");
}

#[tokio::test]
async fn a_hashing_key_other_than_the_stores_is_refused() {
    needs_postgres!();
    let db = Db::new().await;
    let k1 = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    let k2 = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
    assert!(
        db.cpctl_with_key(&["orgs", "create", "keyed"], Some(k1))
            .status
            .success()
    );
    assert!(
        db.cpctl_with_key(&["orgs", "list"], Some(k1))
            .status
            .success()
    );
    for key in [Some(k2), None] {
        let out = db.cpctl_with_key(&["orgs", "list"], key);
        assert!(!out.status.success(), "{key:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("CP_TOKEN_HASH_KEY"), "{err}");
    }
    db.drop_db().await;
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

#[test]
fn policies_test_passes_the_defaults_and_fails_a_disagreeing_component() {
    use control_plane::policy::{defaults, fixtures};
    let authz = write_temp("authz.wasm", defaults::AUTHORIZER);
    let out = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args([
            "policies",
            "test",
            authz.to_str().unwrap(),
            "--cases",
            &cases("authz"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("25 passed, 0 failed"));

    let moderation = write_temp("moderation.wasm", defaults::MODERATOR);
    let out = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args([
            "policies",
            "test",
            moderation.to_str().unwrap(),
            "--kind",
            "moderator",
            "--cases",
            &cases("moderation"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let deny = write_temp("deny.wasm", fixtures::DENY_ALL);
    let out = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args([
            "policies",
            "test",
            deny.to_str().unwrap(),
            "--cases",
            &cases("authz"),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a mismatch exits non-zero");
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL"));
}

#[tokio::test]
async fn policies_install_activate_roll_back_and_refuse_the_wrong_world() {
    use control_plane::policy::{defaults, fixtures};
    needs_postgres!();
    let db = Db::new().await;
    let garbage = write_temp("garbage.wasm", b"not a component at all");
    let out = db.cpctl(&[
        "policies",
        "install",
        garbage.to_str().unwrap(),
        "--kind",
        "authorizer",
        "--name",
        "junk",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a WebAssembly component"));
    let moderation = write_temp("moderation.wasm", defaults::MODERATOR);
    let out = db.cpctl(&[
        "policies",
        "install",
        moderation.to_str().unwrap(),
        "--kind",
        "authorizer",
        "--name",
        "wrong",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not implement"));

    let deny = write_temp("deny.wasm", fixtures::DENY_ALL);
    let out = db.cpctl(&[
        "policies",
        "install",
        deny.to_str().unwrap(),
        "--kind",
        "authorizer",
        "--name",
        "deny-all",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout(&out).trim(), "deny-all@1");
    assert!(
        db.cpctl(&["policies", "activate", "deny-all@1"])
            .status
            .success()
    );
    let list: Value =
        serde_json::from_str(&stdout(&db.cpctl(&["policies", "list", "-o", "json"]))).unwrap();
    assert_eq!(list["active"]["authorizer"], "deny-all@1");
    let removed = db.cpctl(&["policies", "remove", "deny-all@1"]);
    assert!(
        !removed.status.success(),
        "an activated version stays for rollback"
    );
    let rolled = db.cpctl(&["policies", "rollback", "authorizer"]);
    assert!(stdout(&rolled).contains("built-in"), "{}", stdout(&rolled));
    let again = db.cpctl(&["policies", "rollback", "authorizer"]);
    assert!(!again.status.success(), "nothing left to roll back");
    db.drop_db().await;
}

/// `cpctl bootstrap` of organisation `acme`, workspace `prod`, as JSON.
fn bootstrap(db: &Db) -> Value {
    json_of(&db.cpctl(&[
        "bootstrap",
        "--org",
        "acme",
        "--workspace",
        "prod",
        "--admin",
        "ops@acme.test",
        "-o",
        "json",
    ]))
}

fn json_of(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "cpctl failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[tokio::test]
async fn runners_workflows_and_plugins_are_managed_from_the_cli() {
    needs_postgres!();
    let db = Db::new().await;
    let boot = bootstrap(&db);
    let ws = boot["workspaceId"].as_str().unwrap().to_owned();
    let org = boot["organisationId"].as_str().unwrap().to_owned();

    let pool = json_of(&db.cpctl(&[
        "pools",
        "create",
        "--workspace",
        &ws,
        "builders",
        "-o",
        "json",
    ]));
    let pool_id = pool["id"].as_str().unwrap().to_owned();
    let listed = json_of(&db.cpctl(&["pools", "list", "--workspace", &ws, "-o", "json"]));
    assert_eq!(listed[0]["id"], pool["id"]);

    // Without a public key, a pair is generated and the private key printed once.
    let runner = json_of(&db.cpctl(&["runners", "register", "--pool", &pool_id, "-o", "json"]));
    let runner_id = runner["runnerId"].as_str().unwrap().to_owned();
    let key_id = runner["keyId"].as_str().unwrap().to_owned();
    let private = runner["privateKey"].as_str().unwrap().to_owned();
    assert_eq!(private.len(), 44, "base64 of 32 bytes");
    // Its own webhook secret, shown once.
    let secret = runner["webhookSecret"].as_str().unwrap().to_owned();
    RunnerSecret::parse(&secret).expect("a whsec_ secret");

    // Rotating prints a new secret and when the old one stops signing.
    let rotated = json_of(&db.cpctl(&[
        "runners",
        "update",
        "--runner",
        &runner_id,
        "--rotate-secret",
        "--overlap-hours",
        "2",
        "-o",
        "json",
    ]));
    let new_secret = rotated["webhookSecret"].as_str().unwrap();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);
    assert!(rotated["previousSecretRetiresAt"].is_string(), "{rotated}");
    let too_long = db.cpctl(&[
        "runners",
        "update",
        "--runner",
        &runner_id,
        "--rotate-secret",
        "--overlap-hours",
        "721",
    ]);
    assert!(!too_long.status.success());
    assert!(
        stderr(&too_long).contains("720 hours"),
        "{}",
        stderr(&too_long)
    );

    // With a public key (RFC 8032 test 1), nothing secret is printed.
    let given = json_of(&db.cpctl(&[
        "runners",
        "register",
        "--pool",
        &pool_id,
        "--public-key",
        "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=",
        "-o",
        "json",
    ]));
    assert!(given["privateKey"].is_null());
    let bad = db.cpctl(&[
        "runners",
        "register",
        "--pool",
        &pool_id,
        "--public-key",
        "abc",
    ]);
    assert!(!bad.status.success());

    let added = json_of(&db.cpctl(&[
        "runners", "keys", "add", "--runner", &runner_id, "-o", "json",
    ]));
    let second = added["keyId"].as_str().unwrap().to_owned();
    assert_ne!(second, key_id);
    let revoked = db.cpctl(&[
        "runners", "keys", "revoke", "--runner", &runner_id, "--key", &second,
    ]);
    assert!(revoked.status.success());
    let again = db.cpctl(&[
        "runners", "keys", "revoke", "--runner", &runner_id, "--key", &second,
    ]);
    assert!(
        !again.status.success(),
        "a revoked key cannot be revoked twice"
    );

    // Signing needs no database, only the key.
    let signed = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args([
            "runners",
            "sign",
            "--runner",
            &runner_id,
            "--key",
            &key_id,
            "--delivery",
            &uuid::Uuid::new_v4().to_string(),
            "--body",
            r#"{"status":"received"}"#,
        ])
        .env("CP_RUNNER_PRIVATE_KEY", &private)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let line = stdout(&signed);
    assert!(
        signed.status.success(),
        "{}",
        String::from_utf8_lossy(&signed.stderr)
    );
    for header in [
        "x-sandbox-signature",
        "x-sandbox-runner-id",
        "x-sandbox-key-id",
        "x-sandbox-timestamp",
        "x-sandbox-nonce",
    ] {
        assert!(line.contains(header), "{header} missing from {line}");
    }
    assert!(
        !line.contains(&private),
        "the private key is never printed by sign"
    );

    let workflow = json_of(&db.cpctl(&[
        "workflows",
        "create",
        "--workspace",
        &ws,
        "deploy",
        "-o",
        "json",
    ]));
    let wf = workflow["id"].as_str().unwrap().to_owned();
    let r1 = json_of(&db.cpctl(&[
        "workflows",
        "revisions",
        "create",
        "--workflow",
        &wf,
        "-o",
        "json",
    ]));
    let r2 = json_of(&db.cpctl(&[
        "workflows",
        "revisions",
        "create",
        "--workflow",
        &wf,
        "-o",
        "json",
    ]));
    assert_eq!(
        (r1["number"].as_i64(), r2["number"].as_i64()),
        (Some(1), Some(2))
    );
    assert_eq!(r2["state"], "draft");

    let plugin = json_of(&db.cpctl(&["plugins", "create", "--org", &org, "linter", "-o", "json"]));
    let plugins = json_of(&db.cpctl(&["plugins", "list", "-o", "json"]));
    assert_eq!(plugins[0]["id"], plugin["id"]);
    let reviews = json_of(&db.cpctl(&[
        "reviews",
        "list",
        "--plugin",
        plugin["id"].as_str().unwrap(),
        "-o",
        "json",
    ]));
    assert_eq!(reviews, serde_json::json!([]));
    db.drop_db().await;
}

/// Where a runner receives commands is set from the CLI under the egress rule, and a
/// delivery's attempts are read back with `deliveries show`.
#[tokio::test]
async fn runner_delivery_urls_and_delivery_attempts_from_the_cli() {
    needs_postgres!();
    let db = Db::new().await;
    let boot = bootstrap(&db);
    let ws = boot["workspaceId"].as_str().unwrap().to_owned();
    let pool = json_of(&db.cpctl(&[
        "pools",
        "create",
        "--workspace",
        &ws,
        "builders",
        "-o",
        "json",
    ]));
    let pool_id = pool["id"].as_str().unwrap().to_owned();

    // Plain http goes only to the hosts listed (none by default, loopback included),
    // credentials never; the refusal says why.
    for refused in [
        "http://runner.example/hooks",
        "http://127.0.0.1:9/hooks",
        "https://user:secret@runner.example/hooks",
    ] {
        let out = db.cpctl(&["runners", "register", "--pool", &pool_id, "--url", refused]);
        assert!(!out.status.success(), "{refused}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("url"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        if refused.starts_with("http:") {
            assert!(err.contains("must be https"), "{err}");
        }
    }
    // Named explicitly, loopback is allowed.
    let runner = json_of(&db.cpctl(&[
        "runners",
        "register",
        "--pool",
        &pool_id,
        "--url",
        "http://127.0.0.1:9/hooks",
        "--delivery-http-hosts",
        "127.0.0.1",
        "-o",
        "json",
    ]));
    let runner_id = runner["runnerId"].as_str().unwrap().to_owned();
    let updated = json_of(&db.cpctl(&[
        "runners",
        "update",
        "--runner",
        &runner_id,
        "--url",
        "https://runner.example/hooks",
        "-o",
        "json",
    ]));
    assert_eq!(updated["deliveryUrl"], "https://runner.example/hooks");
    // Moving it back to plain http needs the host named again; the refusal says why.
    let plain = db.cpctl(&[
        "runners",
        "update",
        "--runner",
        &runner_id,
        "--url",
        "http://127.0.0.1:9/hooks",
    ]);
    assert!(!plain.status.success());
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(err.contains("must be https"), "{err}");
    // A link-local address (cloud metadata) is refused over https too, with the reason.
    let metadata = db.cpctl(&[
        "runners",
        "update",
        "--runner",
        &runner_id,
        "--url",
        "https://169.254.169.254/latest/meta-data/",
    ]);
    assert!(!metadata.status.success());
    let err = String::from_utf8_lossy(&metadata.stderr);
    assert!(err.contains("link-local"), "{err}");
    let cleared = db.cpctl(&["runners", "update", "--runner", &runner_id, "--clear-url"]);
    assert_eq!(stdout(&cleared).trim(), "(no delivery URL)");

    // A delivery with two recorded attempts (written directly: no server runs here).
    let delivery = uuid::Uuid::new_v4();
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO runner_commands (id, workspace_id, pool_id, command, args, timeout_seconds,
             status, submitted_by, created_at, updated_at, deadline_at)
         VALUES ('{command}', '{ws}', '{pool_id}', 'deploy', '[]', 60, 'queued',
             '{user}', now(), now(), now() + interval '1 minute');
         INSERT INTO webhook_deliveries (id, command_id, status, created_at, updated_at, attempts)
         VALUES ('{delivery}', '{command}', 'pending', now(), now(), 2);
         INSERT INTO webhook_attempts (delivery_id, number, runner_id, url, started_at,
             finished_at, status_code, latency_ms, error)
         VALUES ('{delivery}', 1, '{runner_id}', 'http://127.0.0.1:9/hooks', now(), now(), 500,
                 12, 'HTTP 500'),
                ('{delivery}', 2, '{runner_id}', 'http://127.0.0.1:9/hooks', now(), now(), 202,
                 7, NULL)",
        command = uuid::Uuid::new_v4(),
        user = boot["userId"].as_str().unwrap(),
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    let shown = json_of(&db.cpctl(&["deliveries", "show", &delivery.to_string(), "-o", "json"]));
    assert_eq!(shown["status"], "pending");
    assert_eq!(shown["attempts"][0]["statusCode"], 500);
    assert_eq!(shown["attempts"][0]["error"], "HTTP 500");
    assert_eq!(shown["attempts"][1]["statusCode"], 202);
    assert_eq!(shown["attempts"][1]["latencyMs"], 7);
    let table = stdout(&db.cpctl(&["deliveries", "show", &delivery.to_string()]));
    assert!(
        table.contains("HTTP 500") && table.contains("7 ms"),
        "{table}"
    );
    let unknown = db.cpctl(&["deliveries", "show", &uuid::Uuid::new_v4().to_string()]);
    assert!(!unknown.status.success());
    db.drop_db().await;
}

#[tokio::test]
async fn reviews_restore_publishes_a_hidden_review_and_dismisses_its_reports() {
    needs_postgres!();
    let db = Db::new().await;
    let boot = bootstrap(&db);
    let org = boot["organisationId"].as_str().unwrap().to_owned();
    let user: uuid::Uuid = boot["userId"].as_str().unwrap().parse().unwrap();
    let plugin = json_of(&db.cpctl(&["plugins", "create", "--org", &org, "linter", "-o", "json"]));
    let plugin: uuid::Uuid = plugin["id"].as_str().unwrap().parse().unwrap();

    // A review the moderator hid after reports.
    let review = uuid::Uuid::new_v4();
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query(
        "INSERT INTO plugin_reviews (id, plugin_id, author_id, organisation_id, rating, title,
             body, status, reasons, labels, created_at, updated_at)
         VALUES ($1, $2, $3, $4, 4, 'Fine', 'Does what it says.', 'hidden',
             ARRAY['reported by 3 users'], ARRAY['reported'], now(), now())",
    )
    .bind(review)
    .bind(plugin)
    .bind(user)
    .bind(org.parse::<uuid::Uuid>().unwrap())
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO review_reports (id, review_id, reporter_id, reason, created_at)
         VALUES ($1, $2, $3, 'spam', now())",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(review)
    .bind(user)
    .execute(&mut conn)
    .await
    .unwrap();

    let id = review.to_string();
    let restored = json_of(&db.cpctl(&[
        "reviews",
        "restore",
        "--review",
        &id,
        "--reason",
        "reports were unfounded",
        "-o",
        "json",
    ]));
    assert_eq!(restored["id"], id.as_str());
    assert_eq!(restored["status"], "published", "{restored}");
    assert_eq!(restored["reasons"], serde_json::json!([]));

    let (reports,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM review_reports WHERE review_id = $1")
            .bind(review)
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(reports, 0);
    let (actor, data): (String, Value) = sqlx::query_as(
        "SELECT actor_kind, data FROM audit_events
         WHERE event_type = 'review.restored' AND target_id = $1",
    )
    .bind(review)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(actor, "admin");
    assert_eq!(data["reason"], "reports were unfounded");
    assert_eq!(data["dismissedReports"], 1);

    // Only a hidden review is restored; an empty reason is refused.
    let again = db.cpctl(&["reviews", "restore", "--review", &id]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("only a hidden review"), "{err}");
    let empty = db.cpctl(&["reviews", "restore", "--review", &id, "--reason", ""]);
    assert!(!empty.status.success());
    drop(conn);
    db.drop_db().await;
}

/// `tokens show` and `tokens list` name the issuing token; `tokens revoke --cascade` revokes the
/// whole token and every descendant, grandchildren included, and nothing else.
#[tokio::test]
async fn tokens_show_their_issuer_and_a_cascade_revokes_every_descendant() {
    needs_postgres!();
    let db = Db::new().await;
    let org = stdout(&db.cpctl(&["orgs", "create", "initech"]))
        .trim()
        .to_owned();
    let ws = stdout(&db.cpctl(&["workspaces", "create", "--org", &org, "prod"]))
        .trim()
        .to_owned();
    let user = stdout(&db.cpctl(&["users", "create", "--org", &org, "ops@initech.test"]))
        .trim()
        .to_owned();
    let issue = |name: &str| {
        let out = db.cpctl(&[
            "tokens",
            "issue",
            "--user",
            &user,
            "--name",
            name,
            "--scope",
            "tokens:issue",
            "--workspace",
            &ws,
            "-o",
            "json",
        ]);
        json_of(&out)["id"].as_str().unwrap().to_owned()
    };
    let (root, child, grandchild, other) = (
        issue("root"),
        issue("child"),
        issue("grandchild"),
        issue("other"),
    );
    // cpctl issues tokens without an issuer; the lineage a token-issued chain would record:
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    for (id, parent) in [(&child, &root), (&grandchild, &child)] {
        sqlx::query("UPDATE tokens SET issued_by_token_id = $1 WHERE id = $2")
            .bind(uuid::Uuid::parse_str(parent).unwrap())
            .bind(uuid::Uuid::parse_str(id).unwrap())
            .execute(&mut conn)
            .await
            .unwrap();
    }

    let shown = json_of(&db.cpctl(&["tokens", "show", "--id", &child, "-o", "json"]));
    assert_eq!(shown["id"], child.as_str());
    assert_eq!(shown["issuedByTokenId"], root.as_str());
    let table = stdout(&db.cpctl(&["tokens", "show", "--id", &child]));
    assert!(
        table.contains("ISSUED BY") && table.contains(&root),
        "{table}"
    );
    let list = json_of(&db.cpctl(&["tokens", "list", "-o", "json"]));
    let issuer_of = |id: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap()["issuedByTokenId"]
            .clone()
    };
    assert_eq!(issuer_of(&root), Value::Null);
    assert_eq!(issuer_of(&grandchild), child.as_str());
    assert!(
        !db.cpctl(&["tokens", "show", "--id", &uuid::Uuid::new_v4().to_string()])
            .status
            .success()
    );

    // Neither a workspace nor --cascade: refused before anything runs.
    let refused = db.cpctl(&["tokens", "revoke", "--token", &root, "--reason", "x"]);
    assert!(!refused.status.success());

    let revoked = json_of(&db.cpctl(&[
        "tokens",
        "revoke",
        "--token",
        &root,
        "--reason",
        "leaked",
        "--cascade",
        "-o",
        "json",
    ]));
    assert_eq!(revoked["tokenRevoked"], true);
    assert_eq!(revoked["descendantGrantsRevoked"], 2);
    for id in [&root, &child, &grandchild] {
        let shown = json_of(&db.cpctl(&["tokens", "show", "--id", id, "-o", "json"]));
        assert!(is_api_time(shown["revokedAt"].as_str().unwrap()), "{shown}");
        assert_eq!(shown["workspaceIds"], serde_json::json!([]));
    }
    let shown = json_of(&db.cpctl(&["tokens", "show", "--id", &other, "-o", "json"]));
    assert_eq!(shown["revokedAt"], Value::Null);
    let (events,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM audit_events WHERE event_type = 'token.workspace_access_revoked'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(events, 3, "one event per revoked grant");
    db.drop_db().await;
}

/// Moves a revision to `pending_approval` as the API's request would (no server runs here).
async fn pending(db: &Db, revision: &str, by: &str) {
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query(
        "UPDATE workflow_revisions SET state = 'pending_approval', requested_by = $2,
             requested_at = now()
         WHERE id = $1",
    )
    .bind(revision.parse::<uuid::Uuid>().unwrap())
    .bind(by.parse::<uuid::Uuid>().unwrap())
    .execute(&mut conn)
    .await
    .unwrap();
}

fn failure(o: &Output) -> String {
    assert!(!o.status.success(), "cpctl succeeded: {}", stdout(o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.trim().lines().count(), 1, "one-line error: {err}");
    err
}

/// `workflows revisions approve|reject`: an administrator of the revision's organisation,
/// named by email, by id or by `CP_ACTOR`, decides a pending revision once; a second decision
/// is `invalid_transition`; a non-administrator, a user of another organisation and an unknown
/// revision are refused and change nothing; each decision is audited with its actor.
#[tokio::test]
async fn revisions_are_approved_or_rejected_once_by_an_administrator() {
    needs_postgres!();
    let db = Db::new().await;
    let boot = bootstrap(&db);
    let ws = boot["workspaceId"].as_str().unwrap().to_owned();
    let org = boot["organisationId"].as_str().unwrap().to_owned();
    let admin = boot["userId"].as_str().unwrap().to_owned();

    // Bootstrap's user is an administrator; a plain user is not, unless created --admin.
    let member = json_of(&db.cpctl(&[
        "users",
        "create",
        "--org",
        &org,
        "member@acme.test",
        "-o",
        "json",
    ]));
    assert_eq!(member["admin"], false);
    let users = json_of(&db.cpctl(&["users", "list", "--org", &org, "-o", "json"]));
    let admin_row = users
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["id"] == admin.as_str())
        .unwrap();
    assert_eq!(admin_row["admin"], true);
    let other_org = stdout(&db.cpctl(&["orgs", "create", "initech"]))
        .trim()
        .to_owned();
    let outsider = json_of(&db.cpctl(&[
        "users",
        "create",
        "--org",
        &other_org,
        "--admin",
        "boss@initech.test",
        "-o",
        "json",
    ]));
    assert_eq!(outsider["admin"], true);

    let wf = json_of(&db.cpctl(&[
        "workflows",
        "create",
        "--workspace",
        &ws,
        "deploy",
        "-o",
        "json",
    ]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let revision = |db: &Db| {
        json_of(&db.cpctl(&[
            "workflows",
            "revisions",
            "create",
            "--workflow",
            &wf,
            "-o",
            "json",
        ]))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (r1, r2) = (revision(&db), revision(&db));
    let decide = |verb: &str, revision: &str, actor: &str| {
        db.cpctl(&[
            "workflows",
            "revisions",
            verb,
            "--revision",
            revision,
            "--reason",
            "checked the plan",
            "--actor",
            actor,
            "-o",
            "json",
        ])
    };

    // A draft has not been sent for approval: nothing to decide.
    let err = failure(&decide("approve", &r1, "ops@acme.test"));
    assert!(err.contains("invalid_transition"), "{err}");
    // Requested by the member: the administrator decides someone else's request.
    let member_id = member["id"].as_str().unwrap().to_owned();
    pending(&db, &r1, &member_id).await;
    pending(&db, &r2, &member_id).await;

    // Approved by an administrator named by email.
    let approved = json_of(&decide("approve", &r1, "ops@acme.test"));
    assert_eq!(approved["state"], "approved", "{approved}");
    assert_eq!(approved["decidedBy"], admin.as_str());
    assert_eq!(approved["decisionReason"], "checked the plan");
    assert!(is_api_time(approved["decidedAt"].as_str().unwrap()));

    // A second decision, either way and by anyone, is the state machine's conflict.
    for verb in ["reject", "approve"] {
        let err = failure(&decide(verb, &r1, &admin));
        assert!(err.contains("invalid_transition"), "{err}");
        assert!(err.contains("approved"), "{err}");
    }

    // Refused, changing nothing: a user who is not an administrator, an administrator of
    // another organisation, an unknown user, an unknown revision, an empty reason.
    let err = failure(&decide("approve", &r2, "member@acme.test"));
    assert!(err.contains("not an administrator"), "{err}");
    let err = failure(&decide("approve", &r2, outsider["id"].as_str().unwrap()));
    assert!(err.contains("no such user"), "{err}");
    let err = failure(&decide("approve", &r2, "nobody@acme.test"));
    assert!(err.contains("no such user"), "{err}");
    let err = failure(&decide(
        "approve",
        &uuid::Uuid::new_v4().to_string(),
        &admin,
    ));
    assert!(err.contains("no such workflow revision"), "{err}");
    let empty = db.cpctl(&[
        "workflows",
        "revisions",
        "reject",
        "--revision",
        &r2,
        "--reason",
        "",
        "--actor",
        &admin,
    ]);
    failure(&empty);

    // Rejected by the administrator CP_ACTOR names.
    let rejected = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args([
            "workflows",
            "revisions",
            "reject",
            "--revision",
            &r2,
            "--reason",
            "not now",
            "-o",
            "json",
        ])
        .env("DATABASE_URL", &db.url)
        .env("CP_ACTOR", &admin)
        .env_remove("CP_TOKEN_HASH_KEY")
        .output()
        .unwrap();
    let rejected = json_of(&rejected);
    assert_eq!(rejected["state"], "rejected", "{rejected}");
    assert_eq!(rejected["decisionReason"], "not now");

    // One event per decision, in the workspace's log, with the deciding user as the actor.
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let events: Vec<(String, uuid::Uuid, String, Option<uuid::Uuid>, Value)> = sqlx::query_as(
        "SELECT event_type, target_id, actor_kind, actor_id, data FROM audit_events
         WHERE event_type IN ('workflow_revision.approved', 'workflow_revision.rejected')
         ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let admin_id: uuid::Uuid = admin.parse().unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].0, "workflow_revision.approved");
    assert_eq!(events[0].1.to_string(), r1);
    assert_eq!(events[1].0, "workflow_revision.rejected");
    assert_eq!(events[1].1.to_string(), r2);
    for (_, _, kind, id, data) in &events {
        assert_eq!(kind, "user");
        assert_eq!(*id, Some(admin_id));
        assert_eq!(data["from"], "pending_approval");
        // The actor was named to cpctl, not authenticated: the event says so.
        assert_eq!(data["via"], "cpctl");
        assert_eq!(data["selfApproval"], false);
    }
    assert_eq!(events[1].4["reason"], "not now");

    // Its own requester may not approve a revision, until the organisation allows it.
    let r3 = revision(&db);
    pending(&db, &r3, &admin).await;
    let err = failure(&decide("approve", &r3, &admin));
    assert!(err.contains("requested this revision"), "{err}");
    let allowed = json_of(&db.cpctl(&[
        "orgs",
        "self-approval",
        "--org",
        &org,
        "allow",
        "-o",
        "json",
    ]));
    assert_eq!(allowed["selfApproval"], true);
    let approved = json_of(&decide("approve", &r3, &admin));
    assert_eq!(approved["state"], "approved", "{approved}");
    let (data,): (Value,) = sqlx::query_as(
        "SELECT data FROM audit_events WHERE event_type = 'workflow_revision.approved'
         AND target_id = $1",
    )
    .bind(r3.parse::<uuid::Uuid>().unwrap())
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(data["selfApproval"], true, "{data}");
    assert_eq!(data["via"], "cpctl");
    drop(conn);
    db.drop_db().await;
}

/// `cpctl webhooks keys` prints the key kept in the store (the same on every run, as the server
/// would publish it), or the configured keys, the first marked current.
#[test]
fn webhooks_keys_prints_the_stored_or_configured_public_keys() {
    let dir = std::env::temp_dir().join(format!("cp-cli-{}", uuid::Uuid::new_v4().simple()));
    let cpctl = |configured: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cpctl"));
        command
            .args(["webhooks", "keys", "-o", "json", "--data-dir"])
            .arg(&dir)
            .env_remove("DATABASE_URL")
            .env_remove("CP_TOKEN_HASH_KEY")
            .env_remove("CP_WEBHOOK_SIGNING_KEYS");
        if let Some(keys) = configured {
            command.env("CP_WEBHOOK_SIGNING_KEYS", keys);
        }
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let first = cpctl(None);
    assert_eq!(first.as_array().unwrap().len(), 1, "{first}");
    assert_eq!(first[0]["current"], true);
    assert!(first[0]["publicKey"].as_str().unwrap().starts_with("whpk_"));
    assert_eq!(first[0]["kid"].as_str().unwrap().len(), 11);
    assert_eq!(cpctl(None), first, "the stored key is kept");

    let (new, old) = (
        "FRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRU=",
        "DAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAw=",
    );
    let rotated = cpctl(Some(&format!("{new},{old}")));
    let keys = rotated.as_array().unwrap();
    assert_eq!(keys.len(), 2, "{rotated}");
    assert_eq!(keys[0]["current"], true);
    assert_eq!(keys[1]["current"], false);
    assert_eq!(keys[1]["kid"], cpctl(Some(old))[0]["kid"]);
    assert!(!rotated.to_string().contains(new), "no private key printed");
    let _ = std::fs::remove_dir_all(&dir);
}
