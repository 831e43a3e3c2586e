//! Setting up a store from the CLI: `bootstrap` (its output, its first steps, once only),
//! organisations, workspaces, environments, users and tokens created and listed, shell
//! completions, the embedded store by default, one-line errors for an unusable store or a
//! foreign hashing key, and the webhook signing keys it prints.

use super::*;

#[tokio::test]
async fn bootstrap_prints_ids_and_a_credential_once_and_refuses_a_second_time() {
    let db = Db::new().await;
    let out = db.run("bootstrap --org acme --workspace prod --admin ops@acme.test -o json");
    assert_ok(&out);
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
        control_plane::domain::Scope::ALL.len(),
        "every scope"
    );
    assert_eq!(credential["workspaceIds"][0], v["workspaceId"]);
    assert!(credential["token"].as_str().unwrap().starts_with("cpat_"));
    // The API's one time format (docs/decisions.md, "Times").
    for key in ["createdAt", "expiresAt"] {
        let at = credential[key].as_str().unwrap();
        assert!(is_api_time(at), "{key} = {at}");
    }

    let again = db.run("bootstrap --org acme --workspace prod --admin ops@acme.test");
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one-line error: {err}");
    assert!(err.contains("already exists"), "{err}");
}

/// After the credential, bootstrap prints (stdout only) a `curl` of the workspace's activity
/// with the new token, the `/docs` address built from the listen address, and a `cpctl` line
/// for an activity-only token that works as printed.
#[tokio::test]
async fn bootstrap_prints_first_steps_with_the_new_token() {
    let db = Db::new().await;
    let out =
        db.run("bootstrap --org acme --workspace prod --admin ops@acme.test --listen 0.0.0.0:9090");
    assert_ok(&out);
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
    let cpctl = match db.backend() {
        // A Postgres URL may hold a password: the line names it and never writes it out.
        Backend::Postgres => {
            assert!(
                !text.contains(&db.url),
                "the database URL may hold a password"
            );
            "DATABASE_URL=... cpctl".to_owned()
        }
        // A file's path holds no secret: the line names the file.
        Backend::Sqlite => format!("cpctl --database-url {}", db.url),
    };
    let issue = format!(
        "{cpctl} tokens issue --user {user} --name activity-reader \
         --scope activity:read --workspace {workspace}"
    );
    assert!(text.contains(&issue), "{text}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains(&token),
        "token on stderr"
    );

    // The cpctl line works as printed (DATABASE_URL is set here): its words after `cpctl`.
    let args: Vec<&str> = issue
        .split_whitespace()
        .skip_while(|w| *w != "cpctl")
        .skip(1)
        .collect();
    let issued = json_of(&db.cpctl(&[&args[..], &["-o", "json"]].concat()));
    assert_eq!(issued["scopes"], serde_json::json!(["activity:read"]));
}

#[tokio::test]
async fn create_prints_the_id_and_list_shows_it() {
    let db = Db::new().await;
    let org = stdout(&db.run("orgs create globex")).trim().to_owned();
    assert!(uuid::Uuid::parse_str(&org).is_ok(), "{org}");
    let ws = db.run(&format!("workspaces create --org {org} staging -o json"));
    let ws: Value = serde_json::from_str(&stdout(&ws)).unwrap();
    assert_eq!(ws["name"], "staging");
    let ws_id = ws["id"].as_str().unwrap();
    let env = stdout(&db.run(&format!("environments create --workspace {ws_id} eu")))
        .trim()
        .to_owned();
    assert!(uuid::Uuid::parse_str(&env).is_ok());
    let user = stdout(&db.run(&format!("users create --org {org} dev@globex.test")))
        .trim()
        .to_owned();
    let issued = db.run(&format!("tokens issue --user {user} --name deploy --scope activity:read --workspace {ws_id} --environment {env} -o json"));
    assert_ok(&issued);
    let issued: Value = serde_json::from_str(&stdout(&issued)).unwrap();
    assert_eq!(issued["environmentIds"][0], env.as_str());

    let list: Value = serde_json::from_str(&stdout(&db.run("tokens list -o json"))).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert!(
        !list.to_string().contains(issued["token"].as_str().unwrap()),
        "listings never show a secret"
    );
    let table = stdout(&db.run("orgs list"));
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
    let bad = db.run(&format!(
        "tokens issue --user {user} --name x --scope nope --workspace {ws_id}"
    ));
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown scope"));
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
    // Only `migrate` and `bootstrap` create it: any other verb refuses, and creates nothing.
    let refused = cpctl(&["orgs", "create", "embedded-org"]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("no records store at") && err.contains("cpctl migrate"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!dir.join("control-plane.db").exists());
    assert_ok(&cpctl(&["migrate"]));
    assert!(dir.join("control-plane.db").exists());
    let created = cpctl(&["orgs", "create", "embedded-org"]);
    assert_ok(&created);
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

#[test]
fn every_input_clap_refuses_is_one_line_naming_what_was_wrong() {
    for (args, names) in [
        (&["runners", "list"][..], "--pool"),
        (&["tokens", "rotate"][..], "TOKEN_ID"),
        (&["deliveries", "list", "--pool", "x"][..], "'x'"),
        (
            &["tokens", "list", "--unused-for", "5x"][..],
            "`5x` is not a length of time",
        ),
        (
            &["tokens", "list", "--unsed-for", "5d"][..],
            "'--unused-for'",
        ),
        (
            &[
                "deliveries",
                "recover",
                "--pool",
                "00000000-0000-0000-0000-000000000001",
                "--since",
                "someday",
            ][..],
            "someday",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cpctl"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(names),
            "{args:?}: {err}"
        );
    }
}

#[tokio::test]
async fn a_hashing_key_other_than_the_stores_is_refused() {
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
        assert_ok(&out);
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let migrated = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args(["migrate", "--data-dir"])
        .arg(&dir)
        .env_remove("DATABASE_URL")
        .env_remove("CP_TOKEN_HASH_KEY")
        .env_remove("CP_WEBHOOK_SIGNING_KEYS")
        .output()
        .unwrap();
    assert_ok(&migrated);
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
