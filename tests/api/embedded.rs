//! The embedded default: SQLite records, idempotency records and nonces, in-process rate limits,
//! one server process per file. These tests make their own SQLite file, so they run the same on
//! every suite run.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, SignedHeaders, sign_request};
use control_plane::startup::{Application, open_services};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    Call, TestApp, assert_api_error, captured_logs, issuance_body, routes, spawn_with_config,
    sql_one, sql_value, test_config,
};

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir()
        .join("cp-embedded-tests")
        .join(Uuid::new_v4().simple().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn embedded_config(dir: &std::path::Path) -> ServerConfig {
    let mut config = test_config(&format!("sqlite://{}", dir.join("cp.db").display()));
    config.redis_url = None;
    config
}

#[tokio::test]
async fn embedded_a_second_server_on_the_same_file_is_refused() {
    let dir = temp_dir();
    let config = embedded_config(&dir);
    let first = Application::build(&config)
        .await
        .expect("the first server starts");
    let second = Application::build(&config).await;
    let error = format!("{:#}", second.err().expect("the second server is refused"));
    assert!(error.contains("already using"), "{error}");
    assert!(error.contains("Postgres and Redis"), "{error}");
    drop(first);
    // The lock goes with the first server: the file can be served again.
    assert!(Application::build(&config).await.is_ok());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn embedded_first_start_logs_the_bootstrap_command_once() {
    let dir = temp_dir();
    let config = embedded_config(&dir);
    let app = Application::build(&config).await.expect("starts");
    let logs = captured_logs();
    let path = dir.join("cp.db");
    let expected = format!(
        "cpctl --database-url sqlite://{} bootstrap --org ORG --workspace WORKSPACE --admin EMAIL",
        path.display()
    );
    assert!(logs.contains(&expected), "no bootstrap hint in the logs");
    drop(app);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn embedded_dev_bootstraps_a_tenant_once() {
    let dir = temp_dir();
    let mut config = embedded_config(&dir);
    config.dev = true;
    // In process: the test's own HOME is no place for a context.
    config.dev_context = false;
    let app = Application::build(&config).await.expect("starts");
    let orgs = app.services().list_organisations().await.unwrap();
    assert_eq!(orgs.len(), 1);
    assert_eq!(orgs[0].name, "dev");
    drop(app);
    // A second start finds the tenant and creates nothing.
    let app = Application::build(&config).await.expect("restarts");
    assert_eq!(app.services().list_organisations().await.unwrap().len(), 1);
    drop(app);
    let _ = std::fs::remove_dir_all(dir);
}

/// The mode bits of a file or folder.
fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The store holds secrets: after `--dev` its folder is `0700` and every file the server wrote
/// `0600`; a restart over a file others can read is refused with the command that fixes it.
#[tokio::test]
async fn embedded_the_store_is_the_owners_alone_and_a_loosened_file_is_refused() {
    let dir = temp_dir();
    let data = dir.join("data");
    let mut config = test_config(&format!("sqlite://{}", data.join("cp.db").display()));
    config.redis_url = None;
    config.dev = true;
    config.dev_context = false;
    let app = Application::build(&config).await.expect("starts");
    assert_eq!(mode_of(&data), 0o700, "the data folder");
    let files: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        files.len() >= 3,
        "the database, its WAL and the lock: {files:?}"
    );
    for file in &files {
        assert_eq!(mode_of(file), 0o600, "{}", file.display());
    }
    drop(app);

    use std::os::unix::fs::PermissionsExt;
    let db = data.join("cp.db");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = Application::build(&config).await;
    let error = format!("{:#}", refused.err().expect("a loosened store is refused"));
    assert!(error.contains("cp.db has mode 644"), "{error}");
    assert!(
        error.contains(&format!("chmod go-rwx {}*", db.display())),
        "{error}"
    );
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(Application::build(&config).await.is_ok(), "fixed as told");
    let _ = std::fs::remove_dir_all(dir);
}

/// `--dev` prints, on stdout and never in a log line, first steps that work as printed: the
/// `curl` of the workspace's activity, the `/docs` address on the real port, and the `cpctl`
/// line for a token that only reads activity, which works because the token is kept as
/// cpctl's current context `dev` (owner-only file).
#[tokio::test]
async fn embedded_dev_prints_first_steps_that_work_as_printed() {
    use std::io::BufRead;
    let dir = temp_dir();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_control-plane"));
    let mut child = crate::support::without_shell_settings(&mut server)
        .args(["--dev", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .arg("--data-dir")
        .arg(&dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URL")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start control-plane");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut printed, mut logged) = (Vec::new(), Vec::new());
    for line in lines.by_ref() {
        let line = line.expect("read stdout");
        match serde_json::from_str::<Value>(&line) {
            Ok(entry) => {
                let listening = entry["fields"]["message"] == "listening";
                logged.push(line);
                if listening {
                    break;
                }
            }
            Err(_) => printed.push(line),
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let printed = printed.join("\n");
    let after = |marker: &str| -> String {
        let at = printed
            .find(marker)
            .unwrap_or_else(|| panic!("no {marker:?} in {printed}"));
        printed[at + marker.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let token = after("token (shown once): ");
    let curl = printed
        .lines()
        .find(|l| l.trim_start().starts_with("curl -s "))
        .unwrap_or_else(|| panic!("no curl line in {printed}"));
    assert!(
        curl.contains(&format!("Authorization: Bearer {token}'")),
        "{curl}"
    );
    assert!(
        logged.iter().all(|l| !l.contains(&token)),
        "the token reached a log line"
    );

    // The curl, as printed, answers 200 with the workspace's activity.
    let url = after("curl -s ");
    let client = reqwest::Client::new();
    let response = client.get(&url).bearer_auth(&token).response().await;
    assert_eq!(response.status(), 200, "{url}");
    let body: Value = response.json().await.unwrap();
    assert!(!body["items"].as_array().unwrap().is_empty(), "{body}");

    let docs = after("API documentation: ");
    assert!(docs.ends_with("/docs") && !docs.contains(":0/"), "{docs}");
    assert_eq!(client.get(&docs).response().await.status(), 200);

    // The console, as printed, shows its sign-in page; `--dev` on loopback gives a cookie
    // without Secure (plain http), under a name that is not `__Host-`.
    let console = after("Web console (sign in with this token): ");
    let sign_in = client.get(&console).response().await;
    assert_eq!(sign_in.status(), 200, "{console}");
    assert!(sign_in.text().await.unwrap().contains("Access token"));
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in = no_redirects
        .post(format!("{console}/sign-in"))
        .form(&[("token", token.as_str())])
        .response()
        .await;
    assert_eq!(signed_in.status(), 303);
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cookie.starts_with("cp_console=") && !cookie.contains("Secure"),
        "{cookie}"
    );

    let cpctl = printed
        .lines()
        .find(|l| l.contains("tokens issue"))
        .unwrap_or_else(|| panic!("no cpctl line in {printed}"));
    assert!(
        cpctl.trim_start().starts_with("cpctl tokens issue --user "),
        "{cpctl}"
    );
    assert!(
        printed.contains("cpctl's context dev holds this token"),
        "{printed}"
    );
    let contexts_file = dir.join("config").join("cpctl").join("contexts.json");
    assert_eq!(mode_of(&contexts_file), 0o600);
    assert_eq!(mode_of(contexts_file.parent().unwrap()), 0o700);
    let contexts: Value = serde_json::from_slice(&std::fs::read(&contexts_file).unwrap()).unwrap();
    assert_eq!(contexts["current"], "dev");
    assert_eq!(contexts["contexts"]["dev"]["token"], token.as_str());
    let server = contexts["contexts"]["dev"]["server"].as_str().unwrap();
    assert!(docs.starts_with(server), "{server} serves {docs}");
    assert!(
        cpctl.contains("--scope activity:read --workspace "),
        "{cpctl}"
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn embedded_an_activation_by_cpctl_reaches_the_running_server_within_a_second() {
    let dir = temp_dir();
    let config = embedded_config(&dir);
    let app = spawn_with_config(dir.display().to_string(), config.clone()).await;
    let tenant = app.bootstrap().await;
    let path = routes::activity(tenant.workspace_id);
    let status = || async { app.get(&path, &tenant.token).status_code().await };
    assert_eq!(status().await, 200);

    // What cpctl does: its own pool on the same file, the server still running.
    let admin = open_services(&config).await.expect("cpctl opens the file");
    crate::support::activate_deny_all(&admin).await;
    let started = Instant::now();
    while status().await != 403 {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the activation never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "took {took:?}");
    drop(app);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn embedded_events_written_by_cpctl_reach_the_audit_stream() {
    let dir = temp_dir();
    let config = embedded_config(&dir);
    let app = spawn_with_config(dir.display().to_string(), config.clone()).await;
    let tenant = app.bootstrap().await;
    let mut stream = app
        .get(&routes::audit_stream(tenant.workspace_id), &tenant.token)
        .ok_response()
        .await;
    let first = tokio::time::timeout(Duration::from_secs(5), stream.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains(": subscribed"));

    let admin = open_services(&config).await.expect("cpctl opens the file");
    let pool = admin
        .create_pool(
            tenant.workspace_id,
            "from-cpctl",
            &control_plane::storage::WriteContext::admin(
                &control_plane::domain::CorrelationId::generate(),
            ),
        )
        .await
        .unwrap();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !seen.contains("runner_pool.created") {
        assert!(Instant::now() < deadline, "no event; got {seen:?}");
        if let Ok(Ok(Some(chunk))) =
            tokio::time::timeout(Duration::from_millis(500), stream.chunk()).await
        {
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
    assert!(seen.contains(&pool.id.to_string()));
    drop(app);
    let _ = std::fs::remove_dir_all(dir);
}

/// No switch turns authorization off in a server users run: `--authorizer allow-all` is an
/// unknown flag and `CP_AUTHORIZER` stops the start-up, unless built for the benchmark
/// (`--features bench-allow-all`).
#[cfg(not(feature = "bench-allow-all"))]
#[test]
fn embedded_the_default_binary_refuses_the_allow_all_authorizer() {
    use std::process::{Command, Stdio};
    let dir = temp_dir();
    let run = |args: &[&str], env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_control-plane"));
        crate::support::without_shell_settings(&mut command)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&dir)
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("REDIS_URL")
            .env_remove("CP_AUTHORIZER")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(value) = env {
            command.env("CP_AUTHORIZER", value);
        }
        let mut child = command.spawn().expect("start control-plane");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("the server started with {args:?} CP_AUTHORIZER={env:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, stderr)
    };
    let (status, stderr) = run(&["--authorizer", "allow-all"], None);
    assert!(!status.success());
    assert!(stderr.contains("--authorizer"), "{stderr}");
    for value in ["allow-all", "policy"] {
        let (status, stderr) = run(&[], Some(value));
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("CP_AUTHORIZER is not supported"),
            "{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

async fn audit_events(app: &TestApp) -> i64 {
    sql_value!(app, i64, "SELECT count(*) FROM audit_events")
}

/// A server restarted on the same file, as after a deploy: the first one stopped and gone.
async fn restart(mut app: TestApp) -> TestApp {
    let config = app.config.clone();
    let dir = app.database_name.clone();
    app.stop().await;
    drop(app);
    spawn_with_config(dir, config).await
}

#[tokio::test]
async fn embedded_a_keyed_request_replays_after_a_restart_without_running_again() {
    let dir = temp_dir();
    let app = spawn_with_config(dir.display().to_string(), embedded_config(&dir)).await;
    let tenant = app.bootstrap().await;
    let body = issuance_body(&tenant);
    let key = "restart-key-0000000001";
    let issue = |app: &TestApp| {
        app.post_json(routes::ISSUE_TOKEN, &tenant.token, &body)
            .header("idempotency-key", key)
            .send()
    };
    let first = issue(&app).await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let first_body: Value = first.json().await.unwrap();
    let events_before = audit_events(&app).await;

    let app = restart(app).await;
    let again = issue(&app).await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    let again_body: Value = again.json().await.unwrap();
    assert_eq!(again_body["id"], first_body["id"], "the same token");
    assert_eq!(
        again_body["credential"]["token"], first_body["credential"]["token"],
        "the same secret"
    );
    assert_eq!(again_body, first_body);
    let (tokens,) = sql_one!(
        &mut app.db().await,
        (i64,),
        "SELECT count(*) FROM tokens WHERE name = $1",
        body["name"].as_str().unwrap()
    )
    .unwrap();
    assert_eq!(tokens, 1, "no second token");
    assert_eq!(
        audit_events(&app).await,
        events_before,
        "no second audit event"
    );

    // The same key with another body is still refused as a reuse, not run.
    let mut other = body.clone();
    other["name"] = json!(format!("other-{}", Uuid::new_v4().simple()));
    app.post_json(routes::ISSUE_TOKEN, &tenant.token, &other)
        .header("idempotency-key", key)
        .expect(409, "idempotency_key_reused")
        .await;
    drop(app);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn embedded_a_signed_report_replayed_after_a_restart_is_refused() {
    let dir = temp_dir();
    let app = spawn_with_config(dir.display().to_string(), embedded_config(&dir)).await;
    let tenant = app.bootstrap().await;
    let correlation = CorrelationId::generate();
    let pool = app
        .services
        .create_pool(
            tenant.workspace_id,
            "runners",
            &control_plane::storage::WriteContext::admin(&correlation),
        )
        .await
        .unwrap()
        .id;
    let registered = app
        .services
        .register_runner(
            pool,
            "runner-a",
            None,
            None,
            &control_plane::storage::WriteContext::admin(&correlation),
        )
        .await
        .unwrap();
    let private_key = registered.private_key.expect("a generated key pair");
    let submitted: Value = app
        .post_ok(
            &routes::runner_commands(tenant.workspace_id),
            &tenant.token,
            &json!({"poolId": pool, "command": "make", "args": ["test"]}),
        )
        .await;
    let delivery = submitted["command"]["deliveryId"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = routes::delivery_status(&delivery);
    let report = |app: &TestApp, status: &str| {
        let body = json!({"status": status}).to_string().into_bytes();
        let signed = sign_request(
            &private_key,
            registered.runner.id,
            registered.key_id,
            "POST",
            &path,
            &body,
            chrono::Utc::now().timestamp(),
            &format!("nonce-{}", Uuid::new_v4().simple()),
        );
        (app.url(&path), body, signed)
    };
    let send = |app: &TestApp, (url, body, signed): &(String, Vec<u8>, SignedHeaders)| {
        let mut request = app
            .client
            .post(url)
            .header("content-type", "application/json")
            .body(body.clone());
        for (name, value) in signed.pairs() {
            request = request.header(name, value);
        }
        request.send()
    };
    let captured = report(&app, "received");
    assert_eq!(send(&app, &captured).await.unwrap().status(), 200);

    let app = restart(app).await;
    // The captured request, byte for byte, well within its 300 s window.
    let (_, body, signed) = captured;
    let replay = send(&app, &(app.url(&path), body, signed)).await.unwrap();
    let err = assert_api_error(replay, 401, "invalid_signature").await;
    assert!(
        err["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nonce")),
        "{err}"
    );
    // The restarted server still takes fresh reports.
    let running = report(&app, "running");
    assert_eq!(send(&app, &running).await.unwrap().status(), 200);
    let (status,) = sql_one!(
        &mut app.db().await,
        (String,),
        "SELECT status FROM webhook_deliveries WHERE id = $1",
        Uuid::parse_str(&delivery).unwrap()
    )
    .unwrap();
    assert_eq!(status, "running");
    drop(app);
    let _ = std::fs::remove_dir_all(dir);
}
