//! Offboarding and rotation from the CLI: `users disable|enable|show` and `tokens rotate`, their
//! JSON, their repeats and refusals, and one-line errors for bad input.

use super::*;

/// Bootstraps, then adds a member with one token: (bootstrap JSON, member id, token JSON).
fn member_with_token(db: &Db) -> (Value, String, Value) {
    let boot = bootstrap(db);
    let org = boot["organisationId"].as_str().unwrap();
    let ws = boot["workspaceId"].as_str().unwrap();
    let user = json_of(&db.run(&format!("users create --org {org} ana@acme.test -o json")));
    let user = user["id"].as_str().unwrap().to_owned();
    let token = json_of(&db.run(&format!(
        "tokens issue --user {user} --name laptop --scope activity:read --workspace {ws} -o json"
    )));
    (boot, user, token)
}

#[tokio::test]
async fn users_disable_enable_and_show() {
    let db = Db::new().await;
    let (_, user, token) = member_with_token(&db);
    let token_id = token["id"].as_str().unwrap();

    let disabled = json_of(&db.cpctl(&[
        "users",
        "disable",
        &user,
        "--reason",
        "left the company",
        "-o",
        "json",
    ]));
    assert_eq!(disabled["id"], user.as_str());
    assert_eq!(disabled["disabled"], true);
    assert_eq!(disabled["changed"], true);
    assert_eq!(disabled["disabledReason"], "left the company");
    let at = disabled["disabledAt"].as_str().unwrap();
    assert!(is_api_time(at), "{at}");

    // A repeat is a no-op that says so; the first time and reason stay.
    let again = json_of(&db.run(&format!("users disable {user} --reason other -o json")));
    assert_eq!(again["changed"], false);
    assert_eq!(again["disabledAt"], at);
    assert_eq!(again["disabledReason"], "left the company");
    let table = db.run(&format!("users disable {user}"));
    assert_ok(&table);
    assert!(
        stdout(&table).contains("already disabled"),
        "{}",
        stdout(&table)
    );

    let shown = json_of(&db.run(&format!("users show {user} -o json")));
    assert_eq!(shown["user"]["disabledAt"], at);
    assert_eq!(shown["tokens"].as_array().unwrap().len(), 1);
    assert_eq!(shown["tokens"][0]["id"], token_id);
    let table = db.run(&format!("users show {user}"));
    assert_ok(&table);
    let text = stdout(&table);
    assert!(text.contains("left the company"), "{text}");
    assert!(text.contains(token_id), "{text}");

    // A disabled user's token cannot be rotated.
    let refused = failure(&db.run(&format!("tokens rotate {token_id}")));
    assert!(refused.contains("disabled user"), "{refused}");

    let enabled = json_of(&db.run(&format!("users enable {user} -o json")));
    assert_eq!(enabled["changed"], true);
    assert_eq!(enabled["disabled"], false);
    assert_eq!(enabled["disabledAt"], Value::Null);
    let table = db.run(&format!("users enable {user}"));
    assert!(
        stdout(&table).contains("already enabled"),
        "{}",
        stdout(&table)
    );
    let shown = json_of(&db.run(&format!("users show {user} -o json")));
    assert_eq!(shown["user"]["disabled"], false);

    // Audited once each way, at the organisation, with no email or secret in the data.
    let events = sql_all!(
        &mut db.conn().await,
        (String, String),
        "SELECT event_type, CAST(data AS TEXT) FROM audit_events
         WHERE target_id = $1 AND event_type LIKE 'user.%abled' ORDER BY occurred_at",
        user.parse::<uuid::Uuid>().unwrap(),
    );
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, ["user.disabled", "user.enabled"]);
    assert!(events[0].1.contains("left the company"), "{:?}", events[0]);
    assert!(
        events
            .iter()
            .all(|(_, d)| !d.contains("cpat_") && !d.contains('@'))
    );
}

#[tokio::test]
async fn tokens_rotate_prints_a_new_secret_once_with_or_without_grace() {
    let db = Db::new().await;
    let (boot, _, token) = member_with_token(&db);
    let token_id = token["id"].as_str().unwrap();
    let old = token["token"].as_str().unwrap();

    let rotated = json_of(&db.run(&format!("tokens rotate {token_id} --grace 24h -o json")));
    assert_eq!(rotated["id"], token_id, "the same token");
    let new = rotated["token"].as_str().unwrap();
    assert!(new.starts_with("cpat_") && new != old);
    for key in [
        "scopes",
        "workspaceIds",
        "environmentIds",
        "expiresAt",
        "name",
    ] {
        assert_eq!(rotated[key], token[key], "{key}");
    }
    let until = rotated["previousValidUntil"].as_str().unwrap();
    assert!(is_api_time(until), "{until}");
    let until: chrono::DateTime<chrono::Utc> = until.parse().unwrap();
    let grace = until - chrono::Utc::now();
    assert!(grace > chrono::Duration::hours(23) && grace <= chrono::Duration::hours(24));

    let table = db.run(&format!("tokens rotate {token_id}"));
    assert_ok(&table);
    let text = stdout(&table);
    assert!(text.contains("token:    cpat_"), "{text}");
    assert!(text.contains("stopped working"), "{text}");
    assert!(!stderr(&table).contains("cpat_"), "no secret on stderr");

    // Audited in the token's workspace, twice, with no secret.
    let events = sql_all!(
        &mut db.conn().await,
        (String,),
        "SELECT CAST(data AS TEXT) FROM audit_events
         WHERE target_id = $1 AND event_type = 'token.rotated' AND workspace_id = $2",
        token_id.parse::<uuid::Uuid>().unwrap(),
        boot["workspaceId"]
            .as_str()
            .unwrap()
            .parse::<uuid::Uuid>()
            .unwrap(),
    );
    assert_eq!(events.len(), 2);
    for (data,) in &events {
        assert!(!data.contains(&old[old.len() - 20..]), "{data}");
        assert!(!data.contains(&new[new.len() - 20..]), "{data}");
    }

    // Revoked: refused in one line.
    assert_ok(&db.run(&format!(
        "tokens revoke --token {token_id} --cascade --reason gone"
    )));
    let refused = failure(&db.run(&format!("tokens rotate {token_id} --grace 1h")));
    assert!(refused.contains("is revoked"), "{refused}");
}

#[tokio::test]
async fn bad_input_to_the_new_verbs_is_one_line() {
    let db = Db::new().await;
    let (_, user, token) = member_with_token(&db);
    let token_id = token["id"].as_str().unwrap();
    for (line, says) in [
        ("users disable not-a-uuid".to_owned(), "USER_ID"),
        ("users show not-a-uuid".to_owned(), "USER_ID"),
        (
            format!("users disable {}", uuid::Uuid::new_v4()),
            "no such user",
        ),
        (
            format!("users enable {}", uuid::Uuid::new_v4()),
            "no such user",
        ),
        (
            format!("tokens rotate {token_id} --grace 5x"),
            "not a length of time",
        ),
        (
            format!("tokens rotate {token_id} --grace 31d"),
            "at most 30d",
        ),
        (
            format!("tokens rotate {}", uuid::Uuid::new_v4()),
            "no such token",
        ),
        ("tokens rotate nope".to_owned(), "TOKEN_ID"),
    ] {
        let err = failure(&db.run(&line));
        assert!(err.contains(says), "{line}: {err}");
    }
    let long = "x".repeat(501);
    let err = failure(&db.cpctl(&["users", "disable", &user, "--reason", &long]));
    assert!(err.contains("--reason"), "{err}");
}
