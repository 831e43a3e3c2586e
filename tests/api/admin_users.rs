//! The users of an organisation over the admin API: what an organisation's admin, an operator,
//! a member, another organisation's admin, a lowered or disabled administrator and a replaying
//! client each get, and that every change names the user and token that made it.

use control_plane::domain::{Role, Scope};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Call, RoleHolder, TestApp, event_actor, events_about, routes, tenant_app};

const ADMIN: &[Scope] = &[Scope::AdminRead, Scope::AdminWrite];

fn email() -> String {
    format!("user-{}@example.com", Uuid::new_v4().simple())
}

async fn create(app: &TestApp, org: Uuid, token: &str, body: &Value) -> reqwest::Response {
    app.post_json(&routes::users(org), token, body)
        .response()
        .await
}

fn set_role(
    app: &TestApp,
    org: Uuid,
    user: Uuid,
    token: &str,
    role: &str,
) -> reqwest::RequestBuilder {
    app.request(Method::PUT, &routes::user_role(org, user))
        .bearer_auth(token)
        .json(&json!({ "role": role }))
}

#[tokio::test]
async fn an_organisation_admin_manages_its_users_and_each_change_names_who_made_it() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;

    let created: Value = create(&app, org, &admin.token, &json!({ "email": email() }))
        .await
        .ok()
        .await;
    assert_eq!(created["user"]["role"], "member");
    assert_eq!(created["user"]["disabledAt"], Value::Null);
    let user: Uuid = serde_json::from_value(created["user"]["id"].clone()).unwrap();
    assert_eq!(
        event_actor(&app, "user.created", user).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id))
    );

    let shown: Value = app.get_ok(&routes::user(org, user), &admin.token).await;
    assert_eq!(shown["user"]["id"], json!(user));
    assert_eq!(shown["tokens"], json!([]));

    let body = json!({ "reason": "left the team" });
    let disabled: Value = app
        .post_ok(&routes::disable_user(org, user), &admin.token, &body)
        .await;
    assert_eq!(disabled["changed"], true);
    assert_eq!(disabled["user"]["disabledReason"], "left the team");
    let again: Value = app
        .post_ok(&routes::disable_user(org, user), &admin.token, &body)
        .await;
    assert_eq!(again["changed"], false, "a repeat changes nothing");
    assert_eq!(events_about(&app, "user.disabled", user).await.0, 1);
    assert_eq!(
        event_actor(&app, "user.disabled", user).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id))
    );

    let enabled: Value = app
        .post_ok(&routes::enable_user(org, user), &admin.token, &json!({}))
        .await;
    assert_eq!(enabled["changed"], true);
    assert_eq!(enabled["user"]["disabledAt"], Value::Null);

    let raised: Value = set_role(&app, org, user, &admin.token, "admin").ok().await;
    assert_eq!(raised["user"]["role"], "admin");
    assert_eq!(
        event_actor(&app, "user.role_changed", user).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id))
    );
}

#[tokio::test]
async fn users_are_listed_in_creation_order_by_cursor() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let mut made = vec![tenant.user_id];
    for _ in 0..4 {
        let created: Value = create(&app, org, &tenant.token, &json!({ "email": email() }))
            .await
            .ok()
            .await;
        made.push(serde_json::from_value(created["user"]["id"].clone()).unwrap());
    }
    let mut seen: Vec<Uuid> = vec![];
    let mut path = format!("{}?limit=2", routes::users(org));
    loop {
        let page: Value = app.get_ok(&path, &tenant.token).await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        seen.extend(
            items
                .iter()
                .map(|u| serde_json::from_value::<Uuid>(u["id"].clone()).unwrap()),
        );
        match page["nextCursor"].as_str() {
            Some(cursor) => path = format!("{}?limit=2&cursor={cursor}", routes::users(org)),
            None => break,
        }
    }
    assert_eq!(seen, made);
    // Exactly the document's pattern: empty is the first page, hex in either case a cursor.
    let upper = made[1].to_string().to_uppercase();
    for (cursor, first) in [(String::new(), made[0]), (upper, made[2])] {
        let page: Value = app
            .get_ok(
                &format!("{}?limit=1&cursor={cursor}", routes::users(org)),
                &tenant.token,
            )
            .await;
        assert_eq!(page["items"][0]["id"], json!(first), "cursor={cursor}");
    }
    for cursor in [
        "not-a-cursor".to_owned(),
        made[1].simple().to_string(),
        format!("%7B{}%7D", made[1]),
    ] {
        app.get(
            &format!("{}?cursor={cursor}", routes::users(org)),
            &tenant.token,
        )
        .expect(400, "validation_failed")
        .await;
    }
}

/// Each route of the users API as the matrix calls it.
fn user_routes(org: Uuid, user: Uuid) -> Vec<(Method, String, Option<Value>)> {
    vec![
        (Method::GET, routes::users(org), None),
        (Method::GET, routes::user(org, user), None),
        (
            Method::POST,
            routes::users(org),
            Some(json!({ "email": email() })),
        ),
        (
            Method::POST,
            routes::disable_user(org, user),
            Some(json!({})),
        ),
        (
            Method::POST,
            routes::enable_user(org, user),
            Some(json!({})),
        ),
        (
            Method::PUT,
            routes::user_role(org, user),
            Some(json!({ "role": "member" })),
        ),
    ]
}

async fn status_of(
    app: &TestApp,
    token: &str,
    (method, path, body): &(Method, String, Option<Value>),
) -> u16 {
    let mut request = app.request(method.clone(), path).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    request.status_code().await
}

#[tokio::test]
async fn the_role_table_decides_every_user_operation() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let target = app.member_of(&tenant).await.user_id;
    // Another organisation: its admin, and its operator (bootstrap makes one).
    let other = app.bootstrap().await;
    let foreign_admin = app.user_in_role(&other, Role::Admin, ADMIN).await;
    let reader = app
        .user_in_role(&tenant, Role::Admin, &[Scope::AdminRead])
        .await;
    // A member's token is issued with every scope it may hold: the admin ones are not among them.
    let member = app
        .user_in_role(
            &tenant,
            Role::Member,
            &[Scope::ActivityRead, Scope::TokensIssue],
        )
        .await;

    for route in user_routes(org, target) {
        let label = format!("{} {}", route.0, route.1);
        assert_eq!(
            status_of(&app, &member.token, &route).await,
            403,
            "member: {label}"
        );
        assert_eq!(
            status_of(&app, &foreign_admin.token, &route).await,
            404,
            "another organisation's admin: {label}"
        );
        let read = route.0 == Method::GET;
        assert_eq!(
            status_of(&app, &reader.token, &route).await,
            if read { 200 } else { 403 },
            "admin:read only: {label}"
        );
        assert_eq!(
            status_of(&app, &other.token, &route).await,
            200,
            "operator: {label}"
        );
    }
    // A user of another organisation through this organisation's route is not found, even by
    // this organisation's admin.
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    app.get(&routes::user(org, other.user_id), &admin.token)
        .expect(404, "not_found")
        .await;
    app.get(&routes::user(Uuid::new_v4(), target), &tenant.token)
        .expect(404, "not_found")
        .await;
}

#[tokio::test]
async fn only_an_operator_makes_or_changes_an_operator() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let member = app.member_of(&tenant).await.user_id;
    let operator = tenant.user_id;

    set_role(&app, org, member, &admin.token, "operator")
        .expect(403, "forbidden")
        .await;
    create(
        &app,
        org,
        &admin.token,
        &json!({ "email": email(), "role": "operator" }),
    )
    .await
    .expect(403, "forbidden")
    .await;
    set_role(&app, org, operator, &admin.token, "member")
        .expect(403, "forbidden")
        .await;
    app.post_json(
        &routes::disable_user(org, operator),
        &admin.token,
        &json!({}),
    )
    .expect(403, "forbidden")
    .await;
    // Nothing was written by the refusals.
    assert_eq!(events_about(&app, "user.role_changed", member).await.0, 0);
    assert_eq!(events_about(&app, "user.disabled", operator).await.0, 0);

    let made: Value = set_role(&app, org, member, &tenant.token, "operator")
        .ok()
        .await;
    assert_eq!(made["user"]["role"], "operator");
}

#[tokio::test]
async fn a_lowered_or_disabled_admin_loses_the_api_at_its_next_request() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let lowered = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let disabled = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    for holder in [&lowered, &disabled] {
        app.get(&routes::users(org), &holder.token)
            .ok_response()
            .await;
    }

    set_role(&app, org, lowered.user_id, &tenant.token, "member")
        .ok_response()
        .await;
    let refused = app
        .get(&routes::users(org), &lowered.token)
        .expect(403, "forbidden")
        .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("admin:read"),
        "{refused}"
    );

    app.post_json(
        &routes::disable_user(org, disabled.user_id),
        &tenant.token,
        &json!({}),
    )
    .ok_response()
    .await;
    app.get(&routes::users(org), &disabled.token)
        .expect(401, "unauthenticated")
        .await;
}

#[tokio::test]
async fn a_keyed_creation_runs_once_and_its_replay_is_asked_again() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin: RoleHolder = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let body = json!({ "email": email() });
    let key = format!("k-{}", Uuid::new_v4().simple());
    let send = |token: &str| {
        app.post_json(&routes::users(org), token, &body)
            .header("idempotency-key", key.clone())
    };
    let first: Value = send(&admin.token).ok().await;
    let replay: Value = send(&admin.token).ok().await;
    assert_eq!(first, replay);
    let user: Uuid = serde_json::from_value(first["user"]["id"].clone()).unwrap();
    assert_eq!(events_about(&app, "user.created", user).await.0, 1);

    // Lowered since, the same key's replay is refused as a fresh request would be.
    set_role(&app, org, admin.user_id, &tenant.token, "member")
        .ok_response()
        .await;
    send(&admin.token).expect(403, "forbidden").await;
}

/// A keyed change is committed only once its answer is stored, so the answer must be the user
/// as the change left it, not as a read beside the open write would see it (cpctl keys every
/// change); its replay answers the same.
#[tokio::test]
async fn a_keyed_change_answers_the_user_as_changed() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let created: Value = create(&app, org, &tenant.token, &json!({ "email": email() }))
        .await
        .ok()
        .await;
    let user: Uuid = serde_json::from_value(created["user"]["id"].clone()).unwrap();
    let keyed = |builder: reqwest::RequestBuilder| {
        builder.header("idempotency-key", format!("k-{}", Uuid::new_v4().simple()))
    };

    let disable = keyed(app.post_json(
        &routes::disable_user(org, user),
        &tenant.token,
        &json!({ "reason": "left" }),
    ));
    let replay = disable.try_clone().unwrap();
    let disabled: Value = disable.ok().await;
    assert_eq!(disabled["changed"], true);
    assert_eq!(disabled["user"]["disabledReason"], "left");
    assert!(disabled["user"]["disabledAt"].is_string(), "{disabled}");
    assert_eq!(replay.ok::<Value>().await, disabled);
    let shown: Value = app.get_ok(&routes::user(org, user), &tenant.token).await;
    assert_eq!(shown["user"], disabled["user"]);

    let raised: Value = keyed(set_role(&app, org, user, &tenant.token, "admin"))
        .ok()
        .await;
    assert_eq!(raised["user"]["role"], "admin");
    let enabled: Value =
        keyed(app.post_json(&routes::enable_user(org, user), &tenant.token, &json!({})))
            .ok()
            .await;
    assert_eq!(enabled["user"]["disabledAt"], Value::Null);
    assert_eq!(enabled["user"]["role"], "admin");
}
