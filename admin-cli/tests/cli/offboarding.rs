//! Offboarding and rotation from the CLI, over HTTP: `users disable|enable|show|set-role` and
//! `tokens rotate`, their JSON, their repeats and refusals, the events naming who acted, and
//! one-line errors for bad input.

use super::*;

/// Serves a bootstrapped store, then adds a member of the operator's organisation (the default
/// `--org`) with one token: (the server, member id, token JSON).
async fn member_with_token(db: &Db) -> (Served, String, Value) {
    let server = served(db).await;
    let user = json_of(&server.run("users create ana@acme.test -o json"));
    assert_eq!(user["organisationId"], server.org.as_str());
    let user = user["id"].as_str().unwrap().to_owned();
    let token = json_of(&server.run(&format!(
        "tokens issue --user {user} --name laptop --scope activity:read --workspace {} -o json",
        server.workspace
    )));
    (server, user, token)
}

/// The events of `kind` on `target`, oldest first: (type, data, actor id, actor token id).
async fn events_on(
    db: &Db,
    target: &str,
    kind: &'static str,
) -> Vec<(String, String, Option<uuid::Uuid>, Option<uuid::Uuid>)> {
    sql_all!(
        &mut db.conn().await,
        (String, String, Option<uuid::Uuid>, Option<uuid::Uuid>),
        "SELECT event_type, CAST(data AS TEXT), actor_id, actor_token_id FROM audit_events
         WHERE target_id = $1 AND target_kind = $2 ORDER BY occurred_at",
        target.parse::<uuid::Uuid>().unwrap(),
        kind,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_disable_enable_and_show() {
    let db = Db::new().await;
    let (server, user, token) = member_with_token(&db).await;
    let token_id = token["id"].as_str().unwrap();

    let disabled = json_of(&server.cpctl(&[
        "users",
        "disable",
        &user,
        "--reason",
        "left the company",
        "-o",
        "json",
    ]));
    assert_eq!(disabled["id"], user.as_str());
    assert_eq!(disabled["changed"], true);
    // The answer is the user as it is now, the change made.
    assert_eq!(disabled["disabledReason"], "left the company", "{disabled}");
    let at = disabled["disabledAt"].as_str().unwrap();
    assert!(is_api_time(at), "{at}");

    // A repeat is a no-op that says so; the first time and reason stay.
    let again = json_of(&server.run(&format!("users disable {user} --reason other -o json")));
    assert_eq!(again["changed"], false);
    assert_eq!(again["disabledAt"], at);
    assert_eq!(again["disabledReason"], "left the company");
    let table = server.run(&format!("users disable {user}"));
    assert_ok(&table);
    assert!(
        stdout(&table).contains("already disabled"),
        "{}",
        stdout(&table)
    );

    let shown = json_of(&server.run(&format!("users show {user} -o json")));
    assert_eq!(shown["user"]["disabledAt"], at);
    assert_eq!(shown["tokens"].as_array().unwrap().len(), 1);
    assert_eq!(shown["tokens"][0]["id"], token_id);
    let table = server.run(&format!("users show {user}"));
    assert_ok(&table);
    let text = stdout(&table);
    assert!(text.contains("left the company"), "{text}");
    assert!(text.contains(token_id), "{text}");

    // A disabled user's token cannot be rotated, nor a new one issued.
    let refused = failure(&server.run(&format!("tokens rotate {token_id}")));
    assert!(refused.contains("disabled user"), "{refused}");
    assert!(refused.contains("HTTP 409"), "{refused}");
    let refused = failure(&server.run(&format!(
        "tokens issue --user {user} --name more --scope activity:read --workspace {}",
        server.workspace
    )));
    assert!(refused.contains("disabled"), "{refused}");

    let enabled = json_of(&server.run(&format!("users enable {user} -o json")));
    assert_eq!(enabled["changed"], true);
    assert_eq!(enabled["disabledAt"], Value::Null, "{enabled}");
    assert_eq!(enabled["disabledReason"], Value::Null);
    let table = server.run(&format!("users enable {user}"));
    assert!(
        stdout(&table).contains("already enabled"),
        "{}",
        stdout(&table)
    );
    let shown = json_of(&server.run(&format!("users show {user} -o json")));
    assert_eq!(shown["user"]["disabledAt"], Value::Null);
    assert_eq!(shown["user"]["email"], "ana@acme.test");

    // A role change says whether it changed anything, as disable and enable do.
    let raised = json_of(&server.run(&format!("users set-role {user} --role admin -o json")));
    assert_eq!(raised["role"], "admin", "{raised}");
    assert_eq!(raised["changed"], true);
    let again = json_of(&server.run(&format!("users set-role {user} --role admin -o json")));
    assert_eq!(again["changed"], false);

    // Audited once each way, at the organisation, naming the operator and the token it used,
    // with no email or secret in the data.
    let events = events_on(&db, &user, "user").await;
    let types: Vec<&str> = events.iter().map(|(t, ..)| t.as_str()).collect();
    assert_eq!(
        types,
        [
            "user.created",
            "user.disabled",
            "user.enabled",
            "user.role_changed"
        ]
    );
    assert!(events[1].1.contains("left the company"), "{:?}", events[1]);
    let (operator, credential) = (
        server.user.parse::<uuid::Uuid>().unwrap(),
        server.token_id.parse::<uuid::Uuid>().unwrap(),
    );
    for (kind, data, actor, actor_token) in &events {
        assert_eq!(
            (*actor, *actor_token),
            (Some(operator), Some(credential)),
            "{kind}"
        );
        assert!(!data.contains("cpat_") && !data.contains('@'), "{data}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rotate_prints_a_new_secret_once_with_or_without_grace() {
    let db = Db::new().await;
    let (server, _, token) = member_with_token(&db).await;
    let token_id = token["id"].as_str().unwrap();
    let old = token["token"].as_str().unwrap();

    let rotated = json_of(&server.run(&format!("tokens rotate {token_id} --grace 24h -o json")));
    assert_eq!(rotated["id"], token_id, "the same token");
    let new = rotated["token"].as_str().unwrap();
    assert!(new.starts_with("cpat_") && new != old);
    assert_ne!(rotated["prefix"], token["prefix"]);
    for key in [
        "scopes",
        "workspaceIds",
        "environmentIds",
        "expiresAt",
        "name",
        "organisationId",
    ] {
        assert_eq!(rotated[key], token[key], "{key}");
    }
    let until = rotated["previousValidUntil"].as_str().unwrap();
    assert!(is_api_time(until), "{until}");
    let until: chrono::DateTime<chrono::Utc> = until.parse().unwrap();
    let grace = until - chrono::Utc::now();
    assert!(grace > chrono::Duration::hours(23) && grace <= chrono::Duration::hours(24));

    let table = server.run(&format!("tokens rotate {token_id}"));
    assert_ok(&table);
    let text = stdout(&table);
    assert!(text.contains("token:    cpat_"), "{text}");
    assert!(text.contains("stopped working"), "{text}");
    assert!(!stderr(&table).contains("cpat_"), "no secret on stderr");

    // Audited in the token's workspace, twice, naming the operator, with no secret.
    let events = sql_all!(
        &mut db.conn().await,
        (String, Option<uuid::Uuid>),
        "SELECT CAST(data AS TEXT), actor_id FROM audit_events
         WHERE target_id = $1 AND event_type = 'token.rotated' AND workspace_id = $2",
        token_id.parse::<uuid::Uuid>().unwrap(),
        server.workspace.parse::<uuid::Uuid>().unwrap(),
    );
    assert_eq!(events.len(), 2);
    for (data, actor) in &events {
        assert_eq!(actor.map(|a| a.to_string()), Some(server.user.clone()));
        assert!(!data.contains(&old[old.len() - 20..]), "{data}");
        assert!(!data.contains(&new[new.len() - 20..]), "{data}");
    }

    // Revoked: refused in one line.
    let revoked = json_of(&server.run(&format!(
        "tokens revoke --token {token_id} --cascade --reason gone -o json"
    )));
    assert_eq!(revoked["tokenRevoked"], true);
    assert_eq!(revoked["descendantsRevoked"], 0);
    let refused = failure(&server.run(&format!("tokens rotate {token_id} --grace 1h")));
    assert!(refused.contains("is revoked"), "{refused}");
    assert!(refused.starts_with("error: conflict: "), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_to_the_new_verbs_is_one_line() {
    let db = Db::new().await;
    let (server, user, token) = member_with_token(&db).await;
    let token_id = token["id"].as_str().unwrap();
    let nobody = uuid::Uuid::new_v4();
    // Refused by cpctl before any request, or by the server (`error: CODE: MESSAGE (HTTP …)`).
    for (line, says) in [
        ("users disable not-a-uuid".to_owned(), "USER_ID"),
        ("users show not-a-uuid".to_owned(), "USER_ID"),
        (format!("users disable {nobody}"), "no such user"),
        (format!("users enable {nobody}"), "no such user"),
        (format!("users show {nobody}"), "no such user"),
        (
            format!("tokens rotate {token_id} --grace 5x"),
            "not a length of time",
        ),
        (format!("tokens rotate {nobody}"), "no such token"),
        (format!("tokens show --id {nobody}"), "no such token"),
        ("tokens rotate nope".to_owned(), "TOKEN_ID"),
        ("users create not-an-email".to_owned(), "email"),
    ] {
        let err = failure(&server.run(&line));
        assert!(err.contains(says), "{line}: {err}");
        if says.starts_with("no such") {
            assert!(err.starts_with("error: not_found: "), "{line}: {err}");
            assert!(err.contains("(HTTP 404, correlation id "), "{line}: {err}");
        }
    }
    // The grace's bound (30 days), whichever side checks it.
    let err = failure(&server.run(&format!("tokens rotate {token_id} --grace 31d")));
    assert!(err.contains("grace") && err.contains("30"), "{err}");
    let long = "x".repeat(501);
    let err = failure(&server.cpctl(&["users", "disable", &user, "--reason", &long]));
    assert!(err.contains("reason"), "{err}");
    // None of it changed the user.
    let shown = json_of(&server.run(&format!("users show {user} -o json")));
    assert_eq!(shown["user"]["disabledAt"], Value::Null);
}
