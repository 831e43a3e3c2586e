//! Runner pools, runners (their keys, secrets and delivery URLs under the egress rule),
//! delivery attempts, workflows, plugins and reviews, managed from the CLI.

use super::*;

#[tokio::test]
async fn runners_workflows_and_plugins_are_managed_from_the_cli() {
    let db = Db::new().await;
    let boot = bootstrap(&db);
    let ws = boot["workspaceId"].as_str().unwrap().to_owned();
    let org = boot["organisationId"].as_str().unwrap().to_owned();

    let pool = json_of(&db.run(&format!("pools create --workspace {ws} builders -o json")));
    let pool_id = pool["id"].as_str().unwrap().to_owned();
    let listed = json_of(&db.run(&format!("pools list --workspace {ws} -o json")));
    assert_eq!(listed[0]["id"], pool["id"]);

    // Without a public key, a pair is generated and the private key printed once.
    let runner = json_of(&db.run(&format!("runners register --pool {pool_id} -o json")));
    let runner_id = runner["runnerId"].as_str().unwrap().to_owned();
    let key_id = runner["keyId"].as_str().unwrap().to_owned();
    let private = runner["privateKey"].as_str().unwrap().to_owned();
    assert_eq!(private.len(), 44, "base64 of 32 bytes");
    // Its own webhook secret, shown once.
    let secret = runner["webhookSecret"].as_str().unwrap().to_owned();
    RunnerSecret::parse(&secret).expect("a whsec_ secret");

    // Rotating prints a new secret and when the old one stops signing.
    let rotated = json_of(&db.run(&format!(
        "runners update --runner {runner_id} --rotate-secret --overlap-hours 2 -o json"
    )));
    let new_secret = rotated["webhookSecret"].as_str().unwrap();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);
    assert!(rotated["previousSecretRetiresAt"].is_string(), "{rotated}");
    let too_long = db.run(&format!(
        "runners update --runner {runner_id} --rotate-secret --overlap-hours 721"
    ));
    assert!(!too_long.status.success());
    assert!(
        stderr(&too_long).contains("720 hours"),
        "{}",
        stderr(&too_long)
    );

    // With a public key (RFC 8032 test 1), nothing secret is printed.
    let given = json_of(&db.run(&format!("runners register --pool {pool_id} --public-key 11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo= -o json")));
    assert!(given["privateKey"].is_null());
    let bad = db.run(&format!(
        "runners register --pool {pool_id} --public-key abc"
    ));
    assert!(!bad.status.success());

    let added = json_of(&db.run(&format!("runners keys add --runner {runner_id} -o json")));
    let second = added["keyId"].as_str().unwrap().to_owned();
    assert_ne!(second, key_id);
    let revoked = db.run(&format!(
        "runners keys revoke --runner {runner_id} --key {second}"
    ));
    assert!(revoked.status.success());
    let again = db.run(&format!(
        "runners keys revoke --runner {runner_id} --key {second}"
    ));
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
    assert_ok(&signed);
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

    let workflow = json_of(&db.run(&format!("workflows create --workspace {ws} deploy -o json")));
    let wf = workflow["id"].as_str().unwrap().to_owned();
    let r1 = json_of(&db.run(&format!(
        "workflows revisions create --workflow {wf} -o json"
    )));
    let r2 = json_of(&db.run(&format!(
        "workflows revisions create --workflow {wf} -o json"
    )));
    assert_eq!(
        (r1["number"].as_i64(), r2["number"].as_i64()),
        (Some(1), Some(2))
    );
    assert_eq!(r2["state"], "draft");

    let plugin = json_of(&db.run(&format!("plugins create --org {org} linter -o json")));
    let plugins = json_of(&db.run("plugins list -o json"));
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
}

/// Where a runner receives commands is set from the CLI under the egress rule, and a
/// delivery's attempts are read back with `deliveries show`.
#[tokio::test]
async fn runner_delivery_urls_and_delivery_attempts_from_the_cli() {
    let db = Db::new().await;
    let boot = bootstrap(&db);
    let ws = boot["workspaceId"].as_str().unwrap().to_owned();
    let pool = json_of(&db.run(&format!("pools create --workspace {ws} builders -o json")));
    let pool_id = pool["id"].as_str().unwrap().to_owned();

    // Plain http goes only to the hosts listed (none by default, loopback included),
    // credentials never; the refusal says why.
    for refused in [
        "http://runner.example/hooks",
        "http://127.0.0.1:9/hooks",
        "https://user:secret@runner.example/hooks",
    ] {
        let out = db.run(&format!(
            "runners register --pool {pool_id} --url {refused}"
        ));
        assert!(!out.status.success(), "{refused}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("url"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        if refused.starts_with("http:") {
            assert!(err.contains("must be https"), "{err}");
        }
    }
    // Named explicitly, loopback is allowed.
    let runner = json_of(&db.run(&format!("runners register --pool {pool_id} --url http://127.0.0.1:9/hooks --delivery-http-hosts 127.0.0.1 -o json")));
    let runner_id = runner["runnerId"].as_str().unwrap().to_owned();
    let updated = json_of(&db.run(&format!(
        "runners update --runner {runner_id} --url https://runner.example/hooks -o json"
    )));
    assert_eq!(updated["deliveryUrl"], "https://runner.example/hooks");
    // Moving it back to plain http needs the host named again; the refusal says why.
    let plain = db.run(&format!(
        "runners update --runner {runner_id} --url http://127.0.0.1:9/hooks"
    ));
    assert!(!plain.status.success());
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(err.contains("must be https"), "{err}");
    // A link-local address (cloud metadata) is refused over https too, with the reason.
    let metadata = db.run(&format!(
        "runners update --runner {runner_id} --url https://169.254.169.254/latest/meta-data/"
    ));
    assert!(!metadata.status.success());
    let err = String::from_utf8_lossy(&metadata.stderr);
    assert!(err.contains("link-local"), "{err}");
    let cleared = db.run(&format!("runners update --runner {runner_id} --clear-url"));
    assert_eq!(stdout(&cleared).trim(), "(no delivery URL)");

    // A delivery with two recorded attempts (written directly: no server runs here).
    let (command, delivery) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let runner = runner_id.parse::<uuid::Uuid>().unwrap();
    let now = chrono::Utc::now();
    let mut conn = db.conn().await;
    sql_exec!(
        &mut conn,
        "INSERT INTO runner_commands (id, workspace_id, pool_id, command, args, timeout_seconds,
             status, submitted_by, created_at, updated_at, deadline_at)
         VALUES ($1, $2, $3, 'deploy', '[]', 60, 'queued', $4, $5, $5, $6)",
        command,
        ws.parse::<uuid::Uuid>().unwrap(),
        pool_id.parse::<uuid::Uuid>().unwrap(),
        boot["userId"]
            .as_str()
            .unwrap()
            .parse::<uuid::Uuid>()
            .unwrap(),
        now,
        now + chrono::Duration::minutes(1),
    );
    sql_exec!(
        &mut conn,
        "INSERT INTO webhook_deliveries (id, command_id, status, created_at, updated_at, attempts)
         VALUES ($1, $2, 'pending', $3, $3, 2)",
        delivery,
        command,
        now,
    );
    sql_exec!(
        &mut conn,
        "INSERT INTO webhook_attempts (delivery_id, number, runner_id, url, started_at,
             finished_at, status_code, latency_ms, error)
         VALUES ($1, 1, $2, 'http://127.0.0.1:9/hooks', $3, $3, 500, 12, 'HTTP 500'),
                ($1, 2, $2, 'http://127.0.0.1:9/hooks', $3, $3, 202, 7, NULL)",
        delivery,
        runner,
        now,
    );
    let shown = json_of(&db.run(&format!("deliveries show {delivery} -o json")));
    assert_eq!(shown["status"], "pending");
    assert_eq!(shown["attempts"][0]["statusCode"], 500);
    assert_eq!(shown["attempts"][0]["error"], "HTTP 500");
    assert_eq!(shown["attempts"][1]["statusCode"], 202);
    assert_eq!(shown["attempts"][1]["latencyMs"], 7);
    let table = stdout(&db.run(&format!("deliveries show {delivery}")));
    assert!(
        table.contains("HTTP 500") && table.contains("7 ms"),
        "{table}"
    );
    let unknown = db.run(&format!("deliveries show {}", uuid::Uuid::new_v4()));
    assert!(!unknown.status.success());
}

#[tokio::test]
async fn reviews_restore_publishes_a_hidden_review_and_dismisses_its_reports() {
    let db = Db::new().await;
    let boot = bootstrap(&db);
    let org = boot["organisationId"].as_str().unwrap().to_owned();
    let user: uuid::Uuid = boot["userId"].as_str().unwrap().parse().unwrap();
    let plugin = json_of(&db.run(&format!("plugins create --org {org} linter -o json")));
    let plugin: uuid::Uuid = plugin["id"].as_str().unwrap().parse().unwrap();

    // A review the moderator hid after reports.
    let review = uuid::Uuid::new_v4();
    let now = chrono::Utc::now();
    let mut conn = db.conn().await;
    sql_exec!(
        &mut conn,
        // The two list columns: arrays on Postgres, JSON text on SQLite.
        db.either(
            "INSERT INTO plugin_reviews (id, plugin_id, author_id, organisation_id, rating, title,
                 body, status, reasons, labels, created_at, updated_at)
             VALUES ($1, $2, $3, $4, 4, 'Fine', 'Does what it says.', 'hidden',
                 ARRAY['reported by 3 users'], ARRAY['reported'], $5, $5)",
            r#"INSERT INTO plugin_reviews (id, plugin_id, author_id, organisation_id, rating, title,
                 body, status, reasons, labels, created_at, updated_at)
             VALUES ($1, $2, $3, $4, 4, 'Fine', 'Does what it says.', 'hidden',
                 '["reported by 3 users"]', '["reported"]', $5, $5)"#,
        ),
        review,
        plugin,
        user,
        org.parse::<uuid::Uuid>().unwrap(),
        now,
    );
    sql_exec!(
        &mut conn,
        "INSERT INTO review_reports (id, review_id, reporter_id, reason, created_at)
         VALUES ($1, $2, $3, 'spam', $4)",
        uuid::Uuid::new_v4(),
        review,
        user,
        now,
    );

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

    let (reports,) = sql_one!(
        &mut conn,
        (i64,),
        "SELECT count(*) FROM review_reports WHERE review_id = $1",
        review,
    );
    assert_eq!(reports, 0);
    let (actor, data) = sql_one!(
        &mut conn,
        (String, String),
        "SELECT actor_kind, CAST(data AS TEXT) FROM audit_events
         WHERE event_type = 'review.restored' AND target_id = $1",
        review,
    );
    let data = json(&data);
    assert_eq!(actor, "admin");
    assert_eq!(data["reason"], "reports were unfounded");
    assert_eq!(data["dismissedReports"], 1);

    // Only a hidden review is restored; an empty reason is refused.
    let again = db.run(&format!("reviews restore --review {id}"));
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("only a hidden review"), "{err}");
    let empty = db.cpctl(&["reviews", "restore", "--review", &id, "--reason", ""]);
    assert!(!empty.status.success());
}
