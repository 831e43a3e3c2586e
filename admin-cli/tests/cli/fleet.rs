//! Runners and deliveries after the fact from the CLI: `runners list|disable|enable|
//! remove` and `deliveries list|resend|recover`, in tables and `-o json`, with one-line errors
//! for an unknown id or a wrong state. No server runs here: failed deliveries are written
//! directly.

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

#[tokio::test]
async fn runners_are_listed_disabled_enabled_and_removed_from_the_cli() {
    let db = Db::new().await;
    let boot = bootstrap(&db);
    let ws = boot["workspaceId"].as_str().unwrap().to_owned();
    let pool = json_of(&db.run(&format!("pools create --workspace {ws} builders -o json")));
    let pool = pool["id"].as_str().unwrap().to_owned();
    let runner = json_of(&db.run(&format!(
        "runners register --pool {pool} --name alpha --url https://runner.example/hooks -o json"
    )));
    let runner = runner["runnerId"].as_str().unwrap().to_owned();

    let listed = json_of(&db.run(&format!("runners list --pool {pool} -o json")));
    assert_eq!(listed[0]["id"], runner.as_str());
    assert_eq!(listed[0]["name"], "alpha");
    assert_eq!(listed[0]["url"], "https://runner.example/hooks");
    assert_eq!(listed[0]["state"], "enabled");
    assert_eq!(listed[0]["failuresInARow"], 0);
    assert_eq!(listed[0]["keys"].as_array().unwrap().len(), 1);
    let table = stdout(&db.run(&format!("runners list --pool {pool}")));
    assert!(
        table.starts_with("ID") && table.contains("alpha") && table.contains("enabled"),
        "{table}"
    );

    let disabled = json_of(&db.run(&format!("runners disable {runner} -o json")));
    assert_eq!(disabled["state"], "disabled");
    let listed = json_of(&db.run(&format!("runners list --pool {pool} -o json")));
    assert_eq!(listed[0]["state"], "disabled");
    assert_eq!(listed[0]["disabledReason"], "admin");
    // A repeat changes nothing and says so, as `users disable` does.
    let again = stdout(&db.run(&format!("runners disable {runner}")));
    assert_eq!(
        again.trim(),
        format!("runner {runner} was already disabled")
    );
    let again = json_of(&db.run(&format!("runners disable {runner} -o json")));
    assert_eq!(again["changed"], false);

    let enabled = stdout(&db.run(&format!("runners enable {runner}")));
    assert_eq!(enabled.trim(), format!("runner {runner} enabled"));
    let again = stdout(&db.run(&format!("runners enable {runner}")));
    assert_eq!(again.trim(), format!("runner {runner} was already enabled"));
    let err = failure(&db.run(&format!("runners enable {}", uuid::Uuid::new_v4())));
    assert!(err.contains("no such runner"), "{err}");
    let err = failure(&db.run(&format!(
        "runners list --pool {} -o json",
        uuid::Uuid::new_v4()
    )));
    assert!(err.contains("no such runner pool"), "{err}");

    let removed = json_of(&db.run(&format!("runners remove {runner} -o json")));
    assert_eq!(removed["state"], "removed");
    assert_eq!(removed["keysRevoked"], 1);
    let listed = json_of(&db.run(&format!("runners list --pool {pool} -o json")));
    assert_eq!(listed[0]["state"], "removed");
    assert!(listed[0]["keys"][0]["revokedAt"].is_string());
    let err = failure(&db.run(&format!("runners remove {runner}")));
    assert!(err.contains("already removed"), "{err}");
    let err = failure(&db.run(&format!("runners enable {runner}")));
    assert!(err.contains("removed"), "{err}");
    // A removed runner gets no key back (its reports would count again).
    let err = failure(&db.run(&format!("runners keys add --runner {runner}")));
    assert!(
        err.contains("invalid_state: the runner is removed"),
        "{err}"
    );
}

#[tokio::test]
async fn deliveries_are_listed_resent_and_recovered_from_the_cli() {
    let db = Db::new().await;
    let boot = bootstrap(&db);
    let ws = boot["workspaceId"].as_str().unwrap().to_owned();
    let pool = json_of(&db.run(&format!("pools create --workspace {ws} builders -o json")));
    let pool = pool["id"].as_str().unwrap().to_owned();
    let old = failed_delivery(&db, &boot, &pool, chrono::Duration::days(2)).await;
    let recent = failed_delivery(&db, &boot, &pool, chrono::Duration::hours(1)).await;
    let newest = failed_delivery(&db, &boot, &pool, chrono::Duration::minutes(1)).await;

    let listed = json_of(&db.run(&format!(
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
        "last changed first, none older than T"
    );
    assert_eq!(listed[0]["status"], "failed");
    assert_eq!(listed[0]["webhookId"], newest.as_str());
    let all = json_of(&db.run(&format!(
        "deliveries list --pool {pool} --since 2020-01-01T00:00:00Z -o json"
    )));
    assert_eq!(all.as_array().unwrap().len(), 3);
    let none = json_of(&db.run(&format!(
        "deliveries list --pool {pool} --state pending -o json"
    )));
    assert_eq!(none, serde_json::json!([]));
    let table = stdout(&db.run(&format!("deliveries list --pool {pool}")));
    assert!(table.starts_with("ID") && table.contains(&old), "{table}");
    let bad = db.run(&format!("deliveries list --pool {pool} --since yesterday"));
    assert!(!bad.status.success());
    let err = stderr(&bad);
    assert!(
        err.lines()
            .next()
            .unwrap()
            .contains("neither an RFC 3339 time nor a length of time"),
        "{err}"
    );
    let bad = db.run(&format!("deliveries list --pool {pool} --state lost"));
    assert!(
        stderr(&bad)
            .lines()
            .next()
            .unwrap()
            .contains("must be one of"),
        "{}",
        stderr(&bad)
    );

    // A failed delivery is resent as a new command carrying its webhook-id, once.
    let resent = json_of(&db.run(&format!("deliveries resend {newest} -o json")));
    assert_eq!(resent["deliveryId"], newest.as_str());
    assert_eq!(resent["webhookId"], newest.as_str());
    assert!(resent["newCommandId"].is_string());
    assert_ne!(resent["sentAs"], newest.as_str());
    let err = failure(&db.run(&format!("deliveries resend {newest}")));
    assert!(
        err.contains("invalid_state") && err.contains("already resent"),
        "{err}"
    );
    let err = failure(&db.run(&format!("deliveries resend {}", uuid::Uuid::new_v4())));
    assert!(err.contains("no such delivery"), "{err}");
    // The new delivery is pending, under the same webhook-id.
    let pending = json_of(&db.run(&format!(
        "deliveries list --pool {pool} --state pending -o json"
    )));
    assert_eq!(pending[0]["id"], resent["sentAs"]);
    assert_eq!(pending[0]["webhookId"], newest.as_str());

    // Recovery since 3 days: the two not yet resent, each once; again: none.
    let recovered = json_of(&db.run(&format!(
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
    let again = stdout(&db.run(&format!("deliveries recover --pool {pool} --since 3d")));
    assert!(again.starts_with("0 failed deliveries since"), "{again}");
}
