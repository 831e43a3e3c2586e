//! Token hygiene from the CLI, over HTTP: `tokens list` filtered by expiry and by last use (the
//! server's `listTokens`), and `tokens show` with the last use.

use super::*;

/// Sets a token's times as weeks of use would have left them.
async fn age(db: &Db, id: &str, created_days_ago: i64, used_days_ago: Option<i64>) {
    let now = chrono::Utc::now();
    let used = used_days_ago.map(|d| now - chrono::Duration::days(d));
    let changed = sql_exec!(
        &mut db.conn().await,
        "UPDATE tokens SET created_at = $2, last_used_at = $3,
             last_used_address = CASE WHEN $3 IS NULL THEN NULL ELSE '203.0.113.7' END,
             last_used_agent = CASE WHEN $3 IS NULL THEN NULL ELSE 'deploy-bot/2.1' END
         WHERE id = $1",
        uuid::Uuid::parse_str(id).unwrap(),
        now - chrono::Duration::days(created_days_ago),
        used,
    );
    assert_eq!(changed, 1, "token {id}");
}

fn ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn sorted(of: &[&String]) -> Vec<String> {
    let mut v: Vec<String> = of.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_list_filters_by_expiry_and_last_use_and_show_gives_the_last_use() {
    let db = Db::new().await;
    let server = served(&db).await;
    // Another organisation than the operator's own, named with --org throughout.
    let org = stdout(&server.run("orgs create hooli")).trim().to_owned();
    let run = |line: &str| server.run(&format!("{line} --org {org}"));
    let ws = stdout(&run("workspaces create prod")).trim().to_owned();
    let user_of = |email: &str| {
        stdout(&run(&format!("users create {email}")))
            .trim()
            .to_owned()
    };
    let (ops, dev) = (user_of("ops@hooli.test"), user_of("dev@hooli.test"));
    let issue = |user: &str, name: &str, days: i64| {
        let out = run(&format!(
            "tokens issue --user {user} --name {name} --scope activity:read --workspace {ws} \
             --expires-in-days {days} -o json"
        ));
        json_of(&out)["id"].as_str().unwrap().to_owned()
    };
    let soon = issue(&ops, "soon", 3);
    let idle = issue(&ops, "idle", 60);
    let stale = issue(&ops, "stale", 60);
    let busy = issue(&ops, "busy", 60);
    let fresh = issue(&ops, "fresh", 60);
    let others = issue(&dev, "others", 60);
    let revoked = issue(&ops, "revoked", 3);
    // soon: issued now, never used. idle: issued 40 days ago, never used. stale: last used 40
    // days ago. busy: issued long ago, used yesterday. fresh: issued now, never used.
    age(&db, &idle, 40, None).await;
    age(&db, &stale, 80, Some(40)).await;
    age(&db, &busy, 80, Some(1)).await;
    age(&db, &others, 40, None).await;
    age(&db, &revoked, 40, None).await;
    assert_ok(&run(&format!(
        "tokens revoke --token {revoked} --cascade --reason gone"
    )));

    let expiring = json_of(&run("tokens list --expiring-within 7d -o json"));
    assert_eq!(
        ids(&expiring),
        sorted(&[&soon]),
        "live tokens expiring within 7 days"
    );
    let unused = json_of(&run("tokens list --unused-for 30d -o json"));
    assert_eq!(
        ids(&unused),
        sorted(&[&idle, &stale, &others]),
        "never used and older than 30 days, or last used before"
    );
    let mine = json_of(&run(&format!(
        "tokens list --user {ops} --unused-for 30d -o json"
    )));
    assert_eq!(ids(&mine), sorted(&[&idle, &stale]));
    let both = json_of(&run(
        "tokens list --unused-for 30d --expiring-within 7d -o json",
    ));
    assert_eq!(ids(&both), Vec::<String>::new());
    let all = json_of(&run(&format!("tokens list --user {ops} -o json")));
    assert_eq!(
        all.as_array().unwrap().len(),
        6,
        "no filter: every token, revoked too"
    );
    let in_ws = json_of(&run(&format!("tokens list --workspace {ws} -o json")));
    assert_eq!(
        in_ws.as_array().unwrap().len(),
        6,
        "all but the revoked one"
    );
    // The operator's own organisation holds none of them.
    let own = json_of(&server.run("tokens list -o json"));
    assert_eq!(ids(&own), vec![server.token_id.clone()]);

    // show: the last use, in JSON and in the table.
    let shown = json_of(&run(&format!("tokens show --id {busy} -o json")));
    assert!(
        is_api_time(shown["lastUsedAt"].as_str().unwrap()),
        "{shown}"
    );
    assert_eq!(shown["lastUsedFrom"], "203.0.113.7");
    assert_eq!(shown["lastUsedUserAgent"], "deploy-bot/2.1");
    let never = json_of(&run(&format!("tokens show --id {fresh} -o json")));
    assert_eq!(never["lastUsedAt"], Value::Null);
    assert_eq!(never["lastUsedFrom"], Value::Null);
    let table = stdout(&run(&format!("tokens show --id {busy}")));
    assert!(
        table.contains("LAST USED") && table.contains("203.0.113.7"),
        "{table}"
    );
    assert!(table.contains("last user agent: deploy-bot/2.1"), "{table}");
    let listed = stdout(&run(&format!("tokens list --user {dev}")));
    assert!(listed.contains("never"), "{listed}");
}

#[test]
fn a_bad_span_is_a_one_line_error() {
    for flag in ["--expiring-within 7x", "--unused-for 3y", "--unused-for 30"] {
        let out = Command::new(env!("CARGO_BIN_EXE_cpctl"))
            .args(format!("tokens list {flag}").split_whitespace())
            .env("DATABASE_URL", "postgres://127.0.0.1:1/none")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag}");
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "one line for {flag}: {err}");
        assert!(err.contains("is not a length of time"), "{flag}: {err}");
    }
}
