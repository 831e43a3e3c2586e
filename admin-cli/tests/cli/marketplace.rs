//! Workflows and their revisions, plugins and their reviews, managed from the CLI over HTTP:
//! the organisation defaults to the token's, and another organisation's plugin or workflow is
//! not found. Deciding revisions is `decisions.rs`'s.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_and_plugins_are_managed_from_the_cli() {
    let db = Db::new().await;
    let server = served(&db).await;
    let ws = server.workspace.clone();

    let workflow =
        json_of(&server.run(&format!("workflows create --workspace {ws} deploy -o json")));
    let wf = workflow["id"].as_str().unwrap().to_owned();
    let r1 = json_of(&server.run(&format!(
        "workflows revisions create --workflow {wf} -o json"
    )));
    let r2 = json_of(&server.run(&format!(
        "workflows revisions create --workflow {wf} -o json"
    )));
    assert_eq!(
        (r1["number"].as_i64(), r2["number"].as_i64()),
        (Some(1), Some(2))
    );
    assert_eq!(r2["state"], "draft");
    // Listed by workspace, or across the organisation's workspaces.
    for line in [
        format!("workflows list --workspace {ws} -o json"),
        "workflows list -o json".to_owned(),
    ] {
        let listed = json_of(&server.run(&line));
        assert_eq!(listed[0]["id"], wf.as_str(), "{line}");
    }
    let table = stdout(&server.run("workflows list"));
    assert!(
        table.starts_with("ID") && table.contains("deploy"),
        "{table}"
    );

    let plugin = json_of(&server.run("plugins create linter -o json"));
    assert_eq!(plugin["organisationId"], server.org.as_str());
    let id = plugin["id"].as_str().unwrap().to_owned();
    let plugins = json_of(&server.run(&format!("plugins list --org {} -o json", server.org)));
    assert_eq!(plugins[0]["id"], id.as_str());
    let reviews = json_of(&server.run(&format!("reviews list --plugin {id} -o json")));
    assert_eq!(reviews, serde_json::json!([]));

    // Another organisation sees none of them.
    let other = stdout(&server.run("orgs create initech")).trim().to_owned();
    let theirs = json_of(&server.run(&format!("plugins list --org {other} -o json")));
    assert_eq!(theirs, serde_json::json!([]));
    for line in [
        format!("reviews list --plugin {id} --org {other}"),
        format!("workflows revisions create --workflow {wf} --org {other}"),
        format!("workflows list --workspace {ws} --org {other}"),
    ] {
        let err = failure(&server.run(&line));
        assert!(err.contains("not_found"), "{line}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_restore_publishes_a_hidden_review_and_dismisses_its_reports() {
    let db = Db::new().await;
    let server = served(&db).await;
    let org = server.org.clone();
    let user: uuid::Uuid = server.user.parse().unwrap();
    let plugin = json_of(&server.run("plugins create linter -o json"));
    let plugin: uuid::Uuid = plugin["id"].as_str().unwrap().parse().unwrap();
    let plugin_id = plugin.to_string();

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
    let listed = json_of(&server.run(&format!("reviews list --plugin {plugin_id} -o json")));
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["status"], "hidden");
    let restored = json_of(&server.cpctl(&[
        "reviews",
        "restore",
        "--plugin",
        &plugin_id,
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
    // The operator whose token cpctl holds restored it.
    assert_eq!(actor, "user");
    assert_eq!(data["reason"], "reports were unfounded");
    assert_eq!(data["dismissedReports"], 1);

    // Only a hidden review is restored; an empty reason is refused.
    let again = server.run(&format!(
        "reviews restore --plugin {plugin_id} --review {id}"
    ));
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("only a hidden review"), "{err}");
    let empty = server.cpctl(&[
        "reviews", "restore", "--plugin", &plugin_id, "--review", &id, "--reason", "",
    ]);
    assert!(!empty.status.success());
}
