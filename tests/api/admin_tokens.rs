//! An organisation's tokens over the admin API: what an organisation's admin, an operator, a
//! member, a token without admin scopes and another organisation's admin each get; that an
//! admin cannot reach an operator's secrets or grant what a role disallows; and that every
//! change names the user and token that made it.

use control_plane::domain::{Role, Scope};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Call, Tenant, TestApp, event_actor, events_about, routes, tenant_app};

const ADMIN: &[Scope] = &[Scope::AdminRead, Scope::AdminWrite];

/// An issuance body for the tenant's workspace.
fn issuance(tenant: &Tenant, scopes: &[&str]) -> Value {
    json!({
        "name": format!("t-{}", Uuid::new_v4().simple()),
        "scopes": scopes,
        "workspaceIds": [tenant.workspace_id],
    })
}

/// Issues a token for `user` as `by`, returning (token id, secret).
async fn issue_for(app: &TestApp, tenant: &Tenant, user: Uuid, by: &str) -> (Uuid, String) {
    let body = issuance(tenant, &["activity:read"]);
    let issued: Value = app
        .post_ok(
            &routes::user_tokens(tenant.organisation_id, user),
            by,
            &body,
        )
        .await;
    let credential = &issued["credential"];
    (
        serde_json::from_value(credential["id"].clone()).unwrap(),
        credential["token"].as_str().unwrap().to_owned(),
    )
}

fn id(value: &Value) -> Uuid {
    serde_json::from_value(value.clone()).unwrap()
}

#[tokio::test]
async fn an_organisation_admin_manages_its_tokens_and_each_change_names_who_made_it() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let member = app.member_of(&tenant).await.user_id;
    let named = ("user".to_owned(), Some(admin.user_id), Some(admin.token_id));

    let (token, secret) = issue_for(&app, &tenant, member, &admin.token).await;
    assert_eq!(event_actor(&app, "token.issued", token).await, named);
    // The member's token works, and its record shows it, never its secret.
    app.activity(
        &Tenant {
            token: secret.clone(),
            ..tenant.clone()
        },
        "",
    )
    .await;
    let shown: Value = app.get_ok(&routes::token(org, token), &admin.token).await;
    assert_eq!(shown["token"]["userId"], json!(member));
    assert_eq!(shown["token"]["revokedAt"], Value::Null);
    assert!(!shown.to_string().contains(&secret), "{shown}");

    // Rotation with a grace: both secrets authenticate until it ends.
    let rotated: Value = app
        .post_ok(
            &routes::rotate_token(org, token),
            &admin.token,
            &json!({ "graceSeconds": 3600 }),
        )
        .await;
    let new_secret = rotated["credential"]["token"].as_str().unwrap().to_owned();
    assert_ne!(new_secret, secret);
    assert_eq!(rotated["credential"]["id"], json!(token));
    assert!(rotated["previousValidUntil"].is_string(), "{rotated}");
    for secret in [&secret, &new_secret] {
        app.get(routes::ME, secret).ok_response().await;
    }
    assert_eq!(event_actor(&app, "token.rotated", token).await, named);

    // Revocation without a workspace: the token is gone at once, under either secret.
    let revoked: Value = app
        .post_ok(
            &routes::admin_revoke_token(org, token),
            &admin.token,
            &json!({ "reason": "left the team" }),
        )
        .await;
    assert_eq!(revoked["tokenRevoked"], true);
    for secret in [&secret, &new_secret] {
        app.get(routes::ME, secret)
            .expect(401, "unauthenticated")
            .await;
    }
    assert_eq!(
        event_actor(&app, "token.workspace_access_revoked", token).await,
        named
    );
    // A revoked token cannot be rotated.
    app.post_json(&routes::rotate_token(org, token), &admin.token, &json!({}))
        .expect(409, "conflict")
        .await;
}

#[tokio::test]
async fn tokens_are_listed_by_filter_and_cursor() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let member = app.member_of(&tenant).await.user_id;
    let mut made = vec![];
    for _ in 0..3 {
        made.push(issue_for(&app, &tenant, member, &tenant.token).await.0);
    }
    let base = format!("{}?userId={member}", routes::tokens(org));
    let mut seen: Vec<Uuid> = vec![];
    let mut path = format!("{base}&limit=2");
    loop {
        let page: Value = app.get_ok(&path, &tenant.token).await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        seen.extend(items.iter().map(|t| id(&t["id"])));
        match page["nextCursor"].as_str() {
            Some(cursor) => path = format!("{base}&limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, made);

    // All of them expire within 31 days and none within a minute; none is a day unused.
    for (query, expected) in [
        (format!("expiringWithinSeconds={}", 31 * 86_400), 3),
        ("expiringWithinSeconds=60".to_owned(), 0),
        ("unusedForSeconds=86400".to_owned(), 0),
    ] {
        let page: Value = app.get_ok(&format!("{base}&{query}"), &tenant.token).await;
        assert_eq!(page["items"].as_array().unwrap().len(), expected, "{query}");
    }
    // The organisation's list holds the tenant's own token too; another organisation's
    // tokens are never in it.
    let other = app.bootstrap().await;
    issue_for(&app, &other, other.user_id, &other.token).await;
    let all: Value = app
        .get_ok(&format!("{}?limit=200", routes::tokens(org)), &tenant.token)
        .await;
    let owners: Vec<Uuid> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| id(&t["userId"]))
        .collect();
    assert!(owners.contains(&tenant.user_id) && owners.contains(&member));
    assert!(!owners.contains(&other.user_id), "{all}");
    for query in [
        "expiringWithinSeconds=-1",
        "userId=nobody",
        "cursor=not-a-cursor",
    ] {
        app.get(&format!("{}?{query}", routes::tokens(org)), &tenant.token)
            .expect(400, "validation_failed")
            .await;
    }
}

/// Each route of the tokens API, on a fresh token of `user` for the mutations, as the matrix
/// calls it.
async fn token_route(
    app: &TestApp,
    tenant: &Tenant,
    user: Uuid,
    index: usize,
) -> (Method, String, Option<Value>) {
    let org = tenant.organisation_id;
    let (token, _) = issue_for(app, tenant, user, &tenant.token).await;
    match index {
        0 => (Method::GET, routes::tokens(org), None),
        1 => (Method::GET, routes::token(org, token), None),
        2 => (
            Method::POST,
            routes::user_tokens(org, user),
            Some(issuance(tenant, &["activity:read"])),
        ),
        3 => (
            Method::POST,
            routes::admin_revoke_token(org, token),
            Some(json!({ "reason": "matrix" })),
        ),
        _ => (
            Method::POST,
            routes::rotate_token(org, token),
            Some(json!({ "graceSeconds": 0 })),
        ),
    }
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
async fn the_role_table_decides_every_token_operation() {
    let (app, tenant) = tenant_app().await;
    let target = app.member_of(&tenant).await.user_id;
    let other = app.bootstrap().await;
    let foreign_admin = app.user_in_role(&other, Role::Admin, ADMIN).await;
    let reader = app
        .user_in_role(&tenant, Role::Admin, &[Scope::AdminRead])
        .await;
    let scopeless = app
        .user_in_role(&tenant, Role::Admin, &[Scope::ActivityRead])
        .await;
    let member = app
        .user_in_role(
            &tenant,
            Role::Member,
            &[Scope::ActivityRead, Scope::TokensIssue],
        )
        .await;

    for index in 0..5 {
        let route = token_route(&app, &tenant, target, index).await;
        let label = format!("{} {}", route.0, route.1);
        for (who, token, expected) in [
            ("member", &member.token, 403),
            ("admin without admin scopes", &scopeless.token, 403),
            ("another organisation's admin", &foreign_admin.token, 404),
            (
                "admin:read only",
                &reader.token,
                if route.0 == Method::GET { 200 } else { 403 },
            ),
            // Another organisation's operator: it administers every one.
            ("operator", &other.token, 200),
        ] {
            assert_eq!(
                status_of(&app, token, &route).await,
                expected,
                "{who}: {label}"
            );
        }
    }
    // A token of another organisation through this organisation's route is not found.
    let (foreign, _) = issue_for(&app, &other, other.user_id, &other.token).await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let org = tenant.organisation_id;
    app.get(&routes::token(org, foreign), &admin.token)
        .expect(404, "not_found")
        .await;
    app.post_json(
        &routes::admin_revoke_token(org, foreign),
        &admin.token,
        &json!({ "reason": "probe" }),
    )
    .expect(404, "not_found")
    .await;
    assert_eq!(
        events_about(&app, "token.workspace_access_revoked", foreign)
            .await
            .0,
        0
    );
}

#[tokio::test]
async fn an_admin_reaches_neither_an_operators_secrets_nor_a_scope_its_role_forbids() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let operator = tenant.user_id;
    let (operator_token, _) = issue_for(&app, &tenant, operator, &tenant.token).await;

    // Issuing for, rotating or revoking an operator's token would hand the admin its power.
    app.post_json(
        &routes::user_tokens(org, operator),
        &admin.token,
        &issuance(&tenant, &["activity:read"]),
    )
    .expect(403, "forbidden")
    .await;
    app.post_json(
        &routes::rotate_token(org, operator_token),
        &admin.token,
        &json!({}),
    )
    .expect(403, "forbidden")
    .await;
    app.post_json(
        &routes::admin_revoke_token(org, operator_token),
        &admin.token,
        &json!({ "reason": "coup" }),
    )
    .expect(403, "forbidden")
    .await;
    assert_eq!(
        events_about(&app, "token.rotated", operator_token).await.0,
        0
    );

    // A member's token never holds an admin scope, whoever issues it.
    let member = app.member_of(&tenant).await.user_id;
    for by in [&admin.token, &tenant.token] {
        app.post_json(
            &routes::user_tokens(org, member),
            by,
            &issuance(&tenant, &["admin:read"]),
        )
        .expect(403, "forbidden")
        .await;
    }
    // A disabled user gets no new token.
    app.post_ok::<Value>(&routes::disable_user(org, member), &admin.token, &json!({}))
        .await;
    app.post_json(
        &routes::user_tokens(org, member),
        &admin.token,
        &issuance(&tenant, &["activity:read"]),
    )
    .expect(409, "conflict")
    .await;
}

#[tokio::test]
async fn a_keyed_rotation_runs_once_and_its_replay_is_asked_again() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let member = app.member_of(&tenant).await.user_id;
    let (token, _) = issue_for(&app, &tenant, member, &admin.token).await;
    let key = format!("k-{}", Uuid::new_v4().simple());
    let send = |by: &str| {
        app.post_json(
            &routes::rotate_token(org, token),
            by,
            &json!({ "graceSeconds": 60 }),
        )
        .header("idempotency-key", key.clone())
    };
    let first: Value = send(&admin.token).ok().await;
    let replay: Value = send(&admin.token).ok().await;
    assert_eq!(first, replay);
    assert_eq!(events_about(&app, "token.rotated", token).await.0, 1);

    // Lowered since, the same key's replay (which holds a secret) is refused.
    app.request(Method::PUT, &routes::user_role(org, admin.user_id))
        .bearer_auth(&tenant.token)
        .json(&json!({ "role": "member" }))
        .ok_response()
        .await;
    send(&admin.token).expect(403, "forbidden").await;
}
