//! What the verbs for organisations, workspaces, environments, users and tokens are now that
//! they go over HTTP: `--org` defaults to the caller's organisation, an organisation's admin
//! naming another one is the server's 404 in one line, and none of them opens a records store.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn org_defaults_to_the_callers_and_an_admin_of_another_gets_not_found() {
    let db = Db::new().await;
    let server = served(&db).await;
    let own = |v: &Value| {
        assert_eq!(v["organisationId"], server.org.as_str(), "{v}");
        v["id"].as_str().unwrap().to_owned()
    };

    // Without --org: the operator's own organisation, for every verb.
    let listed = json_of(&server.run("workspaces list -o json"));
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["id"], server.workspace.as_str());
    let staging = own(&json_of(&server.run("workspaces create staging -o json")));
    let env = json_of(&server.run(&format!(
        "environments create --workspace {staging} eu -o json"
    )));
    assert_eq!(env["workspaceId"], staging.as_str());
    let boss = own(&json_of(
        &server.run("users create boss@acme.test --role admin -o json"),
    ));
    let users = json_of(&server.run("users list -o json"));
    assert_eq!(users.as_array().unwrap().len(), 2, "{users}");
    let issued = json_of(&server.run(&format!(
        "tokens issue --user {boss} --name admin --scope admin:read --scope admin:write \
         --workspace {} --workspace {staging} -o json",
        server.workspace
    )));
    own(&issued);
    let admin = issued["token"].as_str().unwrap().to_owned();

    // The operator names another organisation with --org.
    let other = stdout(&server.run("orgs create initech")).trim().to_owned();
    let theirs = json_of(&server.run(&format!("workspaces create --org {other} theirs -o json")));
    assert_eq!(theirs["organisationId"], other.as_str());
    let outsider = stdout(&server.run(&format!("users create --org {other} x@initech.test")))
        .trim()
        .to_owned();
    let listed = json_of(&server.run(&format!("workspaces list --org {other} -o json")));
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["id"], theirs["id"]);

    // The admin's token: its own organisation by default, as the operator's was.
    let mine = json_of(&server.cpctl_as(&admin, &["workspaces", "list", "-o", "json"]));
    assert_eq!(mine.as_array().unwrap().len(), 2, "{mine}");
    let made =
        json_of(&server.cpctl_as(&admin, &["users", "create", "dev@acme.test", "-o", "json"]));
    own(&made);

    // Another organisation, to its admin: the server's 404, one line, exit 1.
    let theirs_ws = theirs["id"].as_str().unwrap();
    for line in [
        format!("workspaces list --org {other}"),
        format!("workspaces create --org {other} mine"),
        format!("environments list --org {other} --workspace {theirs_ws}"),
        format!("users list --org {other}"),
        format!("users create --org {other} spy@initech.test"),
        format!("users show {outsider} --org {other}"),
        format!("users disable {outsider} --org {other}"),
        format!("tokens list --org {other}"),
    ] {
        let out = server.cpctl_as(&admin, &line.split_whitespace().collect::<Vec<_>>());
        assert_eq!(out.status.code(), Some(1), "{line}: {}", stderr(&out));
        let err = failure(&out);
        assert!(err.starts_with("error: not_found: "), "{line}: {err}");
        assert!(err.contains("(HTTP 404, correlation id "), "{line}: {err}");
    }
    // Nothing of it happened: the operator sees the other organisation as it was.
    let users = json_of(&server.run(&format!("users list --org {other} -o json")));
    assert_eq!(users.as_array().unwrap().len(), 1, "{users}");
    assert_eq!(users[0]["disabledAt"], Value::Null);
    let listed = json_of(&server.run(&format!("workspaces list --org {other} -o json")));
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    // Organisations are the operator's alone.
    let err = failure(&server.cpctl_as(&admin, &["orgs", "list"]));
    assert!(err.contains("HTTP 403"), "{err}");
}

/// With the server and token in the environment, a records store that cannot be reached and a
/// data folder that does not exist change nothing: the verbs read neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_verbs_never_open_a_records_store() {
    let db = Db::new().await;
    let server = served(&db).await;
    let nowhere = std::env::temp_dir().join(format!("cp-no-store-{}", uuid::Uuid::new_v4()));
    let unreachable = [
        ("DATABASE_URL", "postgres://127.0.0.1:1/none"),
        ("CP_DATA_DIR", "/proc/cp-no-store-here"),
    ];
    let run = |line: &str| {
        let mut args: Vec<&str> = line.split_whitespace().collect();
        args.extend(["-o", "json", "--data-dir", nowhere.to_str().unwrap()]);
        let out = server.cpctl_with(&server.token, &args, &unreachable);
        json_of(&out)
    };
    let users = run("users list");
    assert_eq!(users[0]["id"], server.user.as_str());
    let orgs = run("orgs list");
    assert_eq!(orgs[0]["id"], server.org.as_str());
    let ws = run("workspaces create elsewhere");
    let ws = ws["id"].as_str().unwrap();
    run(&format!("environments list --workspace {ws}"));
    let shown = run(&format!("users show {}", server.user));
    assert_eq!(shown["tokens"][0]["id"], server.token_id.as_str());
    let tokens = run("tokens list");
    assert_eq!(tokens[0]["id"], server.token_id.as_str());
    assert!(!nowhere.exists(), "{} was created", nowhere.display());
    // The workspace is in the store the server uses.
    let (found,) = sql_one!(
        &mut db.conn().await,
        (i64,),
        "SELECT count(*) FROM workspaces WHERE id = $1",
        ws.parse::<uuid::Uuid>().unwrap(),
    );
    assert_eq!(found, 1);
}

/// `cpctl recover`, a store verb: an existing operator whose tokens are lost gets a one-day token
/// holding the admin scopes only, which the server accepts as that operator; a member's email,
/// an unknown one and a disabled operator get nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_gives_an_operator_a_short_admin_token_and_nobody_else_any() {
    let db = Db::new().await;
    let server = served(&db).await;
    let recovered = json_of(&db.run("recover --operator OPS@acme.test -o json"));
    assert_eq!(
        recovered["scopes"],
        serde_json::json!(["admin:read", "admin:write"])
    );
    let day = |field: &str| {
        chrono::DateTime::parse_from_rfc3339(recovered[field].as_str().unwrap()).unwrap()
    };
    assert_eq!(
        day("expiresAt") - day("createdAt"),
        chrono::Duration::days(1)
    );
    let token = recovered["token"].as_str().unwrap();
    let me = json_of(&server.cpctl_as(token, &["whoami", "-o", "json"]));
    assert_eq!(me["userId"], server.user.as_str());
    assert_eq!(me["role"], "operator");

    let member = stdout(&server.run("users create ana@acme.test"))
        .trim()
        .to_owned();
    for email in ["ana@acme.test", "nobody@acme.test"] {
        let err = failure(&db.run(&format!("recover --operator {email}")));
        assert!(err.contains("no operator has that email"), "{email}: {err}");
    }
    // A disabled operator stays out until another operator enables it.
    assert_ok(&server.run(&format!("users set-role {member} --role operator")));
    assert_ok(&server.run(&format!("users disable {member}")));
    let err = failure(&db.run("recover --operator ana@acme.test"));
    assert!(err.contains("disabled"), "{err}");
    let (tokens,) = sql_one!(
        &mut db.conn().await,
        (i64,),
        "SELECT count(*) FROM tokens WHERE user_id = $1",
        member.parse::<uuid::Uuid>().unwrap(),
    );
    assert_eq!(tokens, 0, "no token for a refused recovery");
}
