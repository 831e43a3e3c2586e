//! Setting up a store from the CLI: `bootstrap` (its output, its first steps, once only),
//! organisations, workspaces, environments, users and tokens created and listed over HTTP, shell
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
/// with the new token, the `/docs` address built from the listen address, how cpctl gets the
/// token (`cpctl login`), and a `cpctl` line for an activity-only token that works as printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
    assert!(
        text.contains("cpctl login --server http://localhost:9090"),
        "{text}"
    );
    if db.backend() == Backend::Postgres {
        assert!(
            !text.contains(&db.url),
            "the database URL may hold a password"
        );
    }
    let issue = format!(
        "cpctl tokens issue --user {user} --name activity-reader \
         --scope activity:read --workspace {workspace}"
    );
    assert!(text.contains(&issue), "{text}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains(&token),
        "token on stderr"
    );

    // The cpctl line works as printed, against a server on this store with this token.
    let boot = serde_json::json!({
        "organisationId": value("organisation:"),
        "workspaceId": workspace,
        "userId": user,
        "credential": {"id": value("id:"), "token": token},
    });
    let server = serve(&db, &boot).await;
    let args: Vec<&str> = issue.split_whitespace().skip(1).collect();
    let issued = json_of(&server.cpctl(&[&args[..], &["-o", "json"]].concat()));
    assert_eq!(issued["scopes"], serde_json::json!(["activity:read"]));
    assert_eq!(issued["workspaceIds"], serde_json::json!([workspace]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_prints_the_id_and_list_shows_it() {
    let db = Db::new().await;
    let server = served(&db).await;
    let org = stdout(&server.run("orgs create globex")).trim().to_owned();
    assert!(uuid::Uuid::parse_str(&org).is_ok(), "{org}");
    let ws = json_of(&server.run(&format!("workspaces create --org {org} staging -o json")));
    assert_eq!(ws["name"], "staging");
    assert_eq!(ws["organisationId"], org.as_str());
    assert!(is_api_time(ws["createdAt"].as_str().unwrap()), "{ws}");
    let ws_id = ws["id"].as_str().unwrap();
    let env = server.run(&format!(
        "environments create --org {org} --workspace {ws_id} eu"
    ));
    let env = stdout(&env).trim().to_owned();
    assert!(uuid::Uuid::parse_str(&env).is_ok(), "{env}");
    let envs = json_of(&server.run(&format!(
        "environments list --org {org} --workspace {ws_id} -o json"
    )));
    assert_eq!(envs[0]["id"], env.as_str());
    assert_eq!(envs[0]["workspaceId"], ws_id);
    let user = stdout(&server.run(&format!("users create --org {org} dev@globex.test")))
        .trim()
        .to_owned();
    let issued = json_of(&server.run(&format!("tokens issue --org {org} --user {user} --name deploy --scope activity:read --workspace {ws_id} --environment {env} -o json")));
    assert_eq!(issued["environmentIds"][0], env.as_str());
    assert_eq!(issued["organisationId"], org.as_str());

    let list = json_of(&server.run(&format!("tokens list --org {org} -o json")));
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["prefix"], issued["prefix"]);
    assert!(
        !list.to_string().contains(issued["token"].as_str().unwrap()),
        "listings never show a secret"
    );
    let table = stdout(&server.run("orgs list"));
    assert!(
        table.starts_with("ID") && table.contains("globex"),
        "{table}"
    );

    let revoked = server.cpctl(&[
        "tokens",
        "revoke",
        "--org",
        &org,
        "--token",
        issued["id"].as_str().unwrap(),
        "--workspace",
        ws_id,
        "--reason",
        "done",
    ]);
    assert_ok(&revoked);
    assert!(
        stdout(&revoked).contains("revoked entirely"),
        "{}",
        stdout(&revoked)
    );
    let bad = failure(&server.run(&format!(
        "tokens issue --org {org} --user {user} --name x --scope nope --workspace {ws_id}"
    )));
    assert!(bad.contains("unknown scope"), "{bad}");
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
    // Only `migrate` and `bootstrap` create it: `recover`, the other store verb that reads
    // it, refuses, and creates nothing.
    let refused = cpctl(&["recover", "--operator", "ops@embedded.test"]);
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
    let boot = cpctl(&[
        "bootstrap",
        "--org",
        "embedded-org",
        "--workspace",
        "prod",
        "--admin",
        "ops@embedded.test",
        "-o",
        "json",
    ]);
    assert_ok(&boot);
    // A store verb that reads what bootstrap wrote: the same embedded store.
    let recovered = cpctl(&["recover", "--operator", "ops@embedded.test", "-o", "json"]);
    assert!(
        json_of(&recovered)["token"].is_string(),
        "{}",
        stderr(&recovered)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unusable_store_is_a_one_line_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args([
            "migrate",
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
    let boot = db.cpctl_with_key(
        &[
            "bootstrap",
            "--org",
            "keyed",
            "--workspace",
            "prod",
            "--admin",
            "ops@keyed.test",
            "-o",
            "json",
        ],
        Some(k1),
    );
    assert_ok(&boot);
    // `recover` opens the store; a hashing key other than the store's would issue a token
    // nobody can use.
    let recover = ["recover", "--operator", "ops@keyed.test"];
    assert_ok(&db.cpctl_with_key(&recover, Some(k1)));
    for key in [Some(k2), None] {
        let out = db.cpctl_with_key(&recover, key);
        assert!(!out.status.success(), "{key:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("CP_TOKEN_HASH_KEY"), "{err}");
    }
}

/// `cpctl webhooks keys` prints the server's public keys: the one kept in its store (the same
/// on every request), or the configured keys, the first marked current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_keys_prints_the_stored_or_configured_public_keys() {
    let keys = |server: &Served| json_of(&server.run("webhooks keys -o json"));
    let db = Db::new().await;
    let stored = served(&db).await;
    let first = keys(&stored);
    assert_eq!(first.as_array().unwrap().len(), 1, "{first}");
    assert_eq!(first[0]["current"], true);
    assert!(first[0]["publicKey"].as_str().unwrap().starts_with("whpk_"));
    assert_eq!(first[0]["kid"].as_str().unwrap().len(), 11);
    assert_eq!(keys(&stored), first, "the stored key is kept");

    let (new, old) = (
        "FRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRU=",
        "DAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAw=",
    );
    // Each configuration on records of its own: one store, one server at a time on SQLite.
    let configured = |keys: String| async move {
        let db = Db::new().await;
        let server = served_with(&db, |c| c.webhook_signing_keys = Some(keys)).await;
        (db, server)
    };
    let (_rotated_db, rotated_server) = configured(format!("{new},{old}")).await;
    let rotated = keys(&rotated_server);
    let listed = rotated.as_array().unwrap();
    assert_eq!(listed.len(), 2, "{rotated}");
    assert_eq!(listed[0]["current"], true);
    assert_eq!(listed[1]["current"], false);
    let (_old_db, old_server) = configured(old.to_owned()).await;
    assert_eq!(listed[1]["kid"], keys(&old_server)[0]["kid"]);
    assert!(!rotated.to_string().contains(new), "no private key printed");
}
