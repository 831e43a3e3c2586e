//! Runners and deliveries after the fact from the CLI: `runners list|disable|enable|
//! remove` and `deliveries list|resend|recover` (over HTTP), in tables and `-o json`, with
//! one-line errors for an unknown id or a wrong state. Failed deliveries are written directly.

use super::*;

/// A failed command and its failed delivery in `pool`, last changed `age` ago.
async fn failed_delivery(db: &Db, boot: &Value, pool: &str, age: chrono::Duration) -> String {
    let (command, delivery) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let uuid = |v: &Value| v.as_str().unwrap().parse::<uuid::Uuid>().unwrap();
    let now = chrono::Utc::now();
    let mut conn = db.conn().await;
    sql_exec!(
        &mut conn,
        "INSERT INTO runner_commands (id, workspace_id, pool_id, command, args, timeout_seconds,
             status, submitted_by, created_at, updated_at, deadline_at)
         VALUES ($1, $2, $3, 'deploy', '[]', 60, 'failed', $4, $5, $5, $6)",
        command,
        uuid(&boot["workspaceId"]),
        pool.parse::<uuid::Uuid>().unwrap(),
        uuid(&boot["userId"]),
        now - age,
        now,
    );
    sql_exec!(
        &mut conn,
        "INSERT INTO webhook_deliveries (id, command_id, status, detail, created_at, updated_at,
             attempts)
         VALUES ($1, $2, 'failed', 'delivery failed after 2 attempts', $3, $3, 2)",
        delivery,
        command,
        now - age,
    );
    delivery.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_are_listed_disabled_enabled_and_removed_from_the_cli() {
    let db = Db::new().await;
    let server = served(&db).await;
    let ws = server.workspace.clone();
    let pool = json_of(&server.run(&format!("pools create --workspace {ws} builders -o json")));
    let pool = pool["id"].as_str().unwrap().to_owned();
    let runner = json_of(&server.run(&format!(
        "runners register --pool {pool} --name alpha --url https://runner.example/hooks -o json"
    )));
    let runner = runner["runnerId"].as_str().unwrap().to_owned();

    let listed = json_of(&server.run(&format!("runners list --pool {pool} -o json")));
    assert_eq!(listed[0]["id"], runner.as_str());
    assert_eq!(listed[0]["name"], "alpha");
    assert_eq!(listed[0]["deliveryUrl"], "https://runner.example/hooks");
    assert_eq!(listed[0]["state"], "enabled");
    assert_eq!(listed[0]["failuresInARow"], 0);
    assert_eq!(listed[0]["keys"].as_array().unwrap().len(), 1);
    let table = stdout(&server.run(&format!("runners list --pool {pool}")));
    assert!(
        table.starts_with("ID") && table.contains("alpha") && table.contains("enabled"),
        "{table}"
    );

    let disabled = json_of(&server.run(&format!("runners disable {runner} -o json")));
    assert_eq!(disabled["state"], "disabled");
    let listed = json_of(&server.run(&format!("runners list --pool {pool} -o json")));
    assert_eq!(listed[0]["state"], "disabled");
    assert_eq!(listed[0]["disabledReason"], "admin");
    // A repeat changes nothing and says so, as `users disable` does.
    let again = stdout(&server.run(&format!("runners disable {runner}")));
    assert_eq!(
        again.trim(),
        format!("runner {runner} was already disabled")
    );
    let again = json_of(&server.run(&format!("runners disable {runner} -o json")));
    assert_eq!(again["changed"], false);

    let enabled = stdout(&server.run(&format!("runners enable {runner}")));
    assert_eq!(enabled.trim(), format!("runner {runner} enabled"));
    let again = stdout(&server.run(&format!("runners enable {runner}")));
    assert_eq!(again.trim(), format!("runner {runner} was already enabled"));
    let err = failure(&server.run(&format!("runners enable {}", uuid::Uuid::new_v4())));
    assert!(err.contains("no such runner"), "{err}");
    let err = failure(&server.run(&format!(
        "runners list --pool {} -o json",
        uuid::Uuid::new_v4()
    )));
    assert!(err.contains("no such runner pool"), "{err}");
    // Another organisation's runner is the server's 404, one line, even to the operator
    // naming it under its own organisation.
    let other = stdout(&server.run("orgs create initech")).trim().to_owned();
    let theirs = json_of(&server.run(&format!("workspaces create --org {other} w -o json")));
    let theirs = theirs["id"].as_str().unwrap();
    let their_pool = json_of(&server.run(&format!(
        "pools create --org {other} --workspace {theirs} p -o json"
    )));
    let their_pool = their_pool["id"].as_str().unwrap();
    let their_runner = json_of(&server.run(&format!(
        "runners register --org {other} --pool {their_pool} -o json"
    )));
    let their_runner = their_runner["runnerId"].as_str().unwrap();
    for line in [
        format!("runners disable {their_runner}"),
        format!("runners list --pool {their_pool}"),
        format!("runners keys add --runner {their_runner}"),
    ] {
        let err = failure(&server.run(&line));
        assert!(
            err.contains("not_found") && err.contains("HTTP 404"),
            "{line}: {err}"
        );
    }
    let theirs_listed = json_of(&server.run(&format!(
        "runners list --org {other} --pool {their_pool} -o json"
    )));
    assert_eq!(
        theirs_listed[0]["state"], "enabled",
        "nothing of theirs changed"
    );

    let removed = json_of(&server.run(&format!("runners remove {runner} -o json")));
    assert_eq!(removed["state"], "removed");
    assert_eq!(removed["keysRevoked"], 1);
    let listed = json_of(&server.run(&format!("runners list --pool {pool} -o json")));
    assert_eq!(listed[0]["state"], "removed");
    assert!(listed[0]["keys"][0]["revokedAt"].is_string());
    let err = failure(&server.run(&format!("runners remove {runner}")));
    assert!(err.contains("already removed"), "{err}");
    let err = failure(&server.run(&format!("runners enable {runner}")));
    assert!(err.contains("removed"), "{err}");
    // A removed runner gets no key back (its reports would count again).
    let err = failure(&server.run(&format!("runners keys add --runner {runner}")));
    assert!(
        err.contains("invalid_state: the runner is removed"),
        "{err}"
    );
}

/// A pool of the bootstrap's workspace, written directly (pools are not this test's subject).
async fn pool_of(db: &Db, workspace: &str) -> String {
    let pool = uuid::Uuid::new_v4();
    sql_exec!(
        &mut db.conn().await,
        "INSERT INTO runner_pools (id, workspace_id, name, created_at) VALUES ($1, $2, $3, $4)",
        pool,
        workspace.parse::<uuid::Uuid>().unwrap(),
        "builders",
        chrono::Utc::now(),
    );
    pool.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_listed_resent_and_recovered_from_the_cli() {
    let db = Db::new().await;
    let server = served(&db).await;
    let boot = serde_json::json!({ "workspaceId": server.workspace, "userId": server.user });
    let pool = pool_of(&db, &server.workspace).await;
    let old = failed_delivery(&db, &boot, &pool, chrono::Duration::days(2)).await;
    let recent = failed_delivery(&db, &boot, &pool, chrono::Duration::hours(1)).await;
    let newest = failed_delivery(&db, &boot, &pool, chrono::Duration::minutes(1)).await;

    let listed = json_of(&server.run(&format!(
        "deliveries list --pool {pool} --state failed --since 24h -o json"
    )));
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [newest.as_str(), recent.as_str()],
        "newest first, none older than T"
    );
    assert_eq!(listed[0]["status"], "failed");
    assert_eq!(listed[0]["webhookId"], newest.as_str());
    let all = json_of(&server.run(&format!(
        "deliveries list --pool {pool} --since 2020-01-01T00:00:00Z -o json"
    )));
    assert_eq!(all.as_array().unwrap().len(), 3);
    let first = json_of(&server.run(&format!("deliveries list --pool {pool} --limit 1 -o json")));
    assert_eq!(first.as_array().unwrap().len(), 1);
    assert_eq!(first[0]["id"], newest.as_str());
    let none = json_of(&server.run(&format!(
        "deliveries list --pool {pool} --state pending -o json"
    )));
    assert_eq!(none, serde_json::json!([]));
    let table = stdout(&server.run(&format!("deliveries list --pool {pool}")));
    assert!(table.starts_with("ID") && table.contains(&old), "{table}");
    let bad = server.run(&format!("deliveries list --pool {pool} --since yesterday"));
    assert!(!bad.status.success());
    let err = stderr(&bad);
    assert!(
        err.lines()
            .next()
            .unwrap()
            .contains("neither an RFC 3339 time nor a length of time"),
        "{err}"
    );
    let bad = server.run(&format!("deliveries list --pool {pool} --state lost"));
    assert!(
        stderr(&bad)
            .lines()
            .next()
            .unwrap()
            .contains("must be one of"),
        "{}",
        stderr(&bad)
    );

    // Another organisation's admin finds neither the pool nor the delivery, and resends
    // nothing.
    let other = stdout(&server.run("orgs create initech")).trim().to_owned();
    let foreign = served_admin(&server, &other).await;
    for line in [
        format!("deliveries resend {newest}"),
        format!("deliveries show {newest}"),
        format!("deliveries list --pool {pool}"),
        format!("deliveries recover --pool {pool} --since 3d"),
        format!("deliveries resend {newest} --org {}", server.org),
    ] {
        let err = failure(&server.cpctl_as(&foreign, &line.split_whitespace().collect::<Vec<_>>()));
        assert!(err.contains("not_found"), "{line}: {err}");
    }

    // A failed delivery is resent as a new command carrying its webhook-id, once.
    let resent = json_of(&server.run(&format!("deliveries resend {newest} -o json")));
    assert_eq!(resent["deliveryId"], newest.as_str());
    assert_eq!(resent["webhookId"], newest.as_str());
    assert!(resent["newCommandId"].is_string());
    assert_ne!(resent["sentAs"], newest.as_str());
    let err = failure(&server.run(&format!("deliveries resend {newest}")));
    assert!(
        err.contains("invalid_state") && err.contains("already resent"),
        "{err}"
    );
    let err = failure(&server.run(&format!("deliveries resend {}", uuid::Uuid::new_v4())));
    assert!(err.contains("no such delivery"), "{err}");
    // The new delivery is pending, under the same webhook-id.
    let pending = json_of(&server.run(&format!(
        "deliveries list --pool {pool} --state pending -o json"
    )));
    assert_eq!(pending[0]["id"], resent["sentAs"]);
    assert_eq!(pending[0]["webhookId"], newest.as_str());

    // Recovery since 3 days: the two not yet resent, each once; again: none.
    let recovered = json_of(&server.run(&format!(
        "deliveries recover --pool {pool} --since 3d -o json"
    )));
    assert_eq!(recovered["resent"], 2);
    let mut ids: Vec<&str> = recovered["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["webhookId"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut expected = [old.as_str(), recent.as_str()];
    expected.sort();
    assert_eq!(ids, expected);
    let again = stdout(&server.run(&format!("deliveries recover --pool {pool} --since 3d")));
    assert!(again.starts_with("0 failed deliveries since"), "{again}");

    // Each resend is audited in the delivery's workspace, naming the operator and its token.
    let (events, actors) = sql_one!(
        &mut db.conn().await,
        (i64, i64),
        "SELECT count(*), count(DISTINCT actor_token_id) FROM audit_events
         WHERE event_type = 'webhook_delivery.resent' AND workspace_id = $1
           AND actor_id = $2 AND actor_token_id = $3",
        server.workspace.parse::<uuid::Uuid>().unwrap(),
        server.user.parse::<uuid::Uuid>().unwrap(),
        server.token_id.parse::<uuid::Uuid>().unwrap(),
    );
    assert_eq!((events, actors), (3, 1));
}

/// A token of a new admin of `org`, issued over HTTP by the bootstrap's operator.
async fn served_admin(server: &Served, org: &str) -> String {
    let ws = stdout(&server.run(&format!("workspaces create --org {org} ops")))
        .trim()
        .to_owned();
    let user = json_of(&server.run(&format!(
        "users create --org {org} --role admin boss-{}@initech.test -o json",
        uuid::Uuid::new_v4().simple()
    )));
    let user = user["id"].as_str().unwrap().to_owned();
    let issued = json_of(&server.run(&format!(
        "tokens issue --org {org} --user {user} --name admin --scope admin:read --scope admin:write --workspace {ws} -o json"
    )));
    issued["token"].as_str().unwrap().to_owned()
}

/// A delivery's attempts are read back with `deliveries show`, over HTTP; another
/// organisation's token finds no such delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_shown_with_its_attempts() {
    let db = Db::new().await;
    let server = served(&db).await;
    let boot = serde_json::json!({ "workspaceId": server.workspace, "userId": server.user });
    let pool = pool_of(&db, &server.workspace).await;
    let delivery = failed_delivery(&db, &boot, &pool, chrono::Duration::minutes(1)).await;
    let runner = uuid::Uuid::new_v4();
    let now = chrono::Utc::now();
    let mut conn = db.conn().await;
    sql_exec!(
        &mut conn,
        "INSERT INTO runners (id, pool_id, name, created_at) VALUES ($1, $2, 'alpha', $3)",
        runner,
        pool.parse::<uuid::Uuid>().unwrap(),
        now,
    );
    sql_exec!(
        &mut conn,
        "INSERT INTO webhook_attempts (delivery_id, number, runner_id, url, started_at,
             finished_at, status_code, latency_ms, error)
         VALUES ($1, 1, $2, 'http://127.0.0.1:9/hooks', $3, $3, 500, 12, 'HTTP 500'),
                ($1, 2, $2, 'http://127.0.0.1:9/hooks', $3, $3, 202, 7, NULL)",
        delivery.parse::<uuid::Uuid>().unwrap(),
        runner,
        now,
    );
    let shown = json_of(&server.run(&format!("deliveries show {delivery} -o json")));
    assert_eq!(shown["id"], delivery.as_str());
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["attempts"][0]["statusCode"], 500);
    assert_eq!(shown["attempts"][0]["error"], "HTTP 500");
    assert_eq!(shown["attempts"][1]["statusCode"], 202);
    assert_eq!(shown["attempts"][1]["latencyMs"], 7);
    let table = stdout(&server.run(&format!("deliveries show {delivery}")));
    assert!(
        table.contains("HTTP 500") && table.contains("LATENCY MS"),
        "{table}"
    );
    let unknown = failure(&server.run(&format!("deliveries show {}", uuid::Uuid::new_v4())));
    assert!(unknown.contains("not_found"), "{unknown}");
    let other = stdout(&server.run("orgs create initech")).trim().to_owned();
    let err = failure(&server.run(&format!("deliveries show {delivery} --org {other}")));
    assert!(err.contains("not_found"), "{err}");
}
