//! An organisation's pools, runners and runner keys over the admin API: the role table for each
//! operation, another organisation's objects as 404s, each change naming the user and token
//! that made it, and a registration's secrets given once (a keyed replay gives them to the same
//! token only).

use chrono::{DateTime, Utc};
use control_plane::domain::{Role, Scope};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    Call, Tenant, TestApp, event_actor, events_about, routes, sql_all, tenant_app,
};

const ADMIN: &[Scope] = &[Scope::AdminRead, Scope::AdminWrite];

fn id(value: &Value) -> Uuid {
    serde_json::from_value(value.clone()).unwrap_or_else(|_| panic!("an id: {value}"))
}

fn name() -> String {
    format!("pool-{}", Uuid::new_v4().simple())
}

/// A pool of `tenant`'s workspace, made over HTTP with `token`.
async fn pool(app: &TestApp, tenant: &Tenant, token: &str) -> Uuid {
    let path = routes::runner_pools(tenant.organisation_id, tenant.workspace_id);
    let made: Value = app
        .post_json(&path, token, &json!({ "name": name() }))
        .ok()
        .await;
    id(&made["pool"]["id"])
}

/// A runner registered over HTTP with `token`: its registration.
async fn register(app: &TestApp, org: Uuid, pool: Uuid, token: &str) -> Value {
    let body = json!({ "name": "alpha" });
    let made: Value = app
        .post_json(&routes::pool_runners(org, pool), token, &body)
        .ok()
        .await;
    made["registration"].clone()
}

async fn send(app: &TestApp, method: Method, path: &str, token: &str, body: &Value) -> Value {
    app.request(method, path)
        .bearer_auth(token)
        .json(body)
        .ok()
        .await
}

#[tokio::test]
async fn an_organisation_admin_manages_its_fleet_and_each_change_names_who_made_it() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let actor = ("user".to_owned(), Some(admin.user_id), Some(admin.token_id));

    let pool = pool(&app, &tenant, &admin.token).await;
    assert_eq!(event_actor(&app, "runner_pool.created", pool).await, actor);
    let pools: Value = app
        .get_ok(
            &routes::runner_pools(org, tenant.workspace_id),
            &admin.token,
        )
        .await;
    assert_eq!(pools["items"][0]["id"], json!(pool));

    // Registered without a public key: the server made the pair; the private key and the
    // webhook secret are in this answer, and never in a listing.
    let registration = register(&app, org, pool, &admin.token).await;
    let runner = id(&registration["runnerId"]);
    let secret = registration["webhookSecret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{registration}");
    assert!(registration["privateKey"].is_string(), "{registration}");
    assert_eq!(event_actor(&app, "runner.registered", runner).await, actor);
    let listed: Value = app
        .get_ok(&routes::pool_runners(org, pool), &admin.token)
        .await;
    assert_eq!(listed["items"][0]["id"], json!(runner));
    assert_eq!(listed["items"][0]["state"], "enabled");
    assert_eq!(listed["items"][0]["keys"].as_array().unwrap().len(), 1);
    let text = listed.to_string();
    assert!(
        !text.contains(&secret) && !text.contains("privateKey"),
        "{text}"
    );

    // The server's egress rule decides the URL: plain http to a host it does not list is a 400.
    let url_path = format!("{}/delivery-url", routes::runner(org, runner));
    let set = send(
        &app,
        Method::PUT,
        &url_path,
        &admin.token,
        &json!({ "url": "https://runner.example/hooks" }),
    )
    .await;
    assert_eq!(set["deliveryUrl"], "https://runner.example/hooks");
    assert_eq!(
        event_actor(&app, "runner.delivery_url_set", runner).await,
        actor
    );
    let refused = app
        .request(Method::PUT, &url_path)
        .bearer_auth(&admin.token)
        .json(&json!({ "url": "http://runner.example/hooks" }))
        .expect(400, "validation_failed")
        .await;
    assert_eq!(refused["error"]["details"]["field"], "url", "{refused}");
    let cleared = send(&app, Method::PUT, &url_path, &admin.token, &json!({})).await;
    assert_eq!(cleared["deliveryUrl"], Value::Null);

    // A rotation keeps the replaced secret signing for the overlap asked (24 hours unless said).
    let rotate = format!("{}/webhook-secret/rotate", routes::runner(org, runner));
    let before = Utc::now();
    let rotated = send(
        &app,
        Method::POST,
        &rotate,
        &admin.token,
        &json!({ "overlapHours": 48 }),
    )
    .await;
    let new_secret = rotated["webhookSecret"].as_str().unwrap();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);
    let retires: DateTime<Utc> =
        serde_json::from_value(rotated["previousSecretRetiresAt"].clone()).unwrap();
    let overlap = retires - before;
    assert!(
        overlap >= chrono::Duration::hours(48) && overlap < chrono::Duration::hours(49),
        "{rotated}"
    );
    assert_eq!(
        event_actor(&app, "runner.webhook_secret_rotated", runner).await,
        actor
    );
    let default = send(&app, Method::POST, &rotate, &admin.token, &json!({})).await;
    let retires: DateTime<Utc> =
        serde_json::from_value(default["previousSecretRetiresAt"].clone()).unwrap();
    assert!(retires - Utc::now() <= chrono::Duration::hours(24));
    assert!(retires - Utc::now() > chrono::Duration::hours(23));
    for hours in [json!(721), json!(-1), json!("24")] {
        app.post_json(&rotate, &admin.token, &json!({ "overlapHours": hours }))
            .expect(400, "validation_failed")
            .await;
    }

    let disable = format!("{}/disable", routes::runner(org, runner));
    let disabled = send(&app, Method::POST, &disable, &admin.token, &json!({})).await;
    assert_eq!(
        (disabled["state"].clone(), disabled["changed"].clone()),
        (json!("disabled"), json!(true))
    );
    let again = send(&app, Method::POST, &disable, &admin.token, &json!({})).await;
    assert_eq!(again["changed"], false, "a repeat changes nothing");
    assert_eq!(events_about(&app, "runner.disabled", runner).await.0, 1);
    assert_eq!(event_actor(&app, "runner.disabled", runner).await, actor);
    let enable = format!("{}/enable", routes::runner(org, runner));
    let enabled = send(&app, Method::POST, &enable, &admin.token, &json!({})).await;
    assert_eq!(enabled["changed"], true);
    assert_eq!(event_actor(&app, "runner.enabled", runner).await, actor);

    // A key for rotation: generated, its private half answered once; then the first revoked.
    let keys = format!("{}/keys", routes::runner(org, runner));
    let added = send(&app, Method::POST, &keys, &admin.token, &json!({})).await;
    assert!(added["privateKey"].is_string(), "{added}");
    assert_eq!(event_actor(&app, "runner.key_added", runner).await, actor);
    let public = base64_public_key();
    let given = send(
        &app,
        Method::POST,
        &keys,
        &admin.token,
        &json!({ "publicKey": public }),
    )
    .await;
    assert_eq!(given["privateKey"], Value::Null);
    app.post_json(&keys, &admin.token, &json!({ "publicKey": "not base64!" }))
        .expect(400, "validation_failed")
        .await;
    let first_key = registration["keyId"].as_str().unwrap();
    let revoke = routes::runner_key(org, runner, first_key);
    let revoked = send(&app, Method::DELETE, &revoke, &admin.token, &json!({})).await;
    assert_eq!(revoked["revoked"], true);
    assert_eq!(event_actor(&app, "runner.key_revoked", runner).await, actor);
    app.request(Method::DELETE, &revoke)
        .bearer_auth(&admin.token)
        .json(&json!({}))
        .expect(404, "not_found")
        .await;

    let removed = send(
        &app,
        Method::DELETE,
        &routes::runner(org, runner),
        &admin.token,
        &json!({}),
    )
    .await;
    assert_eq!(removed["state"], "removed");
    assert_eq!(removed["keysRevoked"], 2);
    assert_eq!(event_actor(&app, "runner.removed", runner).await, actor);
    app.request(Method::DELETE, &routes::runner(org, runner))
        .bearer_auth(&admin.token)
        .json(&json!({}))
        .expect(409, "invalid_state")
        .await;
}

/// Base64 of a valid Ed25519 public key.
fn base64_public_key() -> String {
    use base64::Engine;
    let (_, public) = control_plane::domain::generate_keypair();
    base64::engine::general_purpose::STANDARD.encode(public)
}

#[tokio::test]
async fn runners_and_pools_are_listed_in_creation_order_by_cursor() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let pool = pool(&app, &tenant, &tenant.token).await;
    let mut made = vec![];
    for _ in 0..5 {
        made.push(id(
            &register(&app, org, pool, &tenant.token).await["runnerId"],
        ));
    }
    let base = routes::pool_runners(org, pool);
    let mut seen = vec![];
    let mut path = format!("{base}?limit=2");
    loop {
        let page: Value = app.get_ok(&path, &tenant.token).await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        for item in items {
            // Each runner with its own key, not another page's.
            assert_eq!(item["keys"].as_array().unwrap().len(), 1, "{item}");
            seen.push(id(&item["id"]));
        }
        match page["nextCursor"].as_str() {
            Some(cursor) => path = format!("{base}?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, made);
    app.get(&format!("{base}?cursor=nope"), &tenant.token)
        .expect(400, "validation_failed")
        .await;

    let second = self::pool(&app, &tenant, &tenant.token).await;
    let pools = routes::runner_pools(org, tenant.workspace_id);
    let first: Value = app.get_ok(&format!("{pools}?limit=1"), &tenant.token).await;
    assert_eq!(first["items"][0]["id"], json!(pool));
    let cursor = first["nextCursor"].as_str().unwrap();
    let next: Value = app
        .get_ok(&format!("{pools}?limit=1&cursor={cursor}"), &tenant.token)
        .await;
    assert_eq!(next["items"][0]["id"], json!(second));
    assert_eq!(next["nextCursor"], Value::Null);
}

/// Each route of the fleet API as the matrix calls it, the removal last (it ends the runner).
fn fleet_routes(
    tenant: &Tenant,
    pool: Uuid,
    runner: Uuid,
    key: Uuid,
) -> Vec<(Method, String, Value)> {
    let org = tenant.organisation_id;
    let at = |suffix: &str| format!("{}{suffix}", routes::runner(org, runner));
    vec![
        (
            Method::GET,
            routes::runner_pools(org, tenant.workspace_id),
            Value::Null,
        ),
        (
            Method::POST,
            routes::runner_pools(org, tenant.workspace_id),
            json!({ "name": name() }),
        ),
        (Method::GET, routes::pool_runners(org, pool), Value::Null),
        (
            Method::POST,
            routes::pool_runners(org, pool),
            json!({ "name": "beta" }),
        ),
        (Method::PUT, at("/delivery-url"), json!({})),
        (Method::POST, at("/webhook-secret/rotate"), json!({})),
        (Method::POST, at("/disable"), json!({})),
        (Method::POST, at("/enable"), json!({})),
        (Method::POST, at("/keys"), json!({})),
        (
            Method::DELETE,
            routes::runner_key(org, runner, key),
            json!({}),
        ),
        (Method::DELETE, routes::runner(org, runner), json!({})),
    ]
}

async fn status_of(
    app: &TestApp,
    token: &str,
    (method, path, body): &(Method, String, Value),
) -> u16 {
    let mut request = app.request(method.clone(), path).bearer_auth(token);
    if !body.is_null() {
        request = request.json(body);
    }
    request.status_code().await
}

#[tokio::test]
async fn the_role_table_decides_every_fleet_operation() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let pool = pool(&app, &tenant, &tenant.token).await;
    let registration = register(&app, org, pool, &tenant.token).await;
    let runner = id(&registration["runnerId"]);
    let added = send(
        &app,
        Method::POST,
        &format!("{}/keys", routes::runner(org, runner)),
        &tenant.token,
        &json!({}),
    )
    .await;
    let key = id(&added["keyId"]);
    // Another organisation: its admin, and its operator (bootstrap makes one).
    let other = app.bootstrap().await;
    let foreign_admin = app.user_in_role(&other, Role::Admin, ADMIN).await;
    let reader = app
        .user_in_role(&tenant, Role::Admin, &[Scope::AdminRead])
        .await;
    let member = app
        .user_in_role(
            &tenant,
            Role::Member,
            &[Scope::ActivityRead, Scope::TokensIssue],
        )
        .await;

    for route in fleet_routes(&tenant, pool, runner, key) {
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
}

#[tokio::test]
async fn another_organisations_pools_runners_and_keys_are_not_found_through_this_ones_routes() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let other = app.bootstrap().await;
    let foreign_pool = pool(&app, &other, &other.token).await;
    let foreign = register(&app, other.organisation_id, foreign_pool, &other.token).await;
    let foreign_runner = id(&foreign["runnerId"]);
    let foreign_key = id(&foreign["keyId"]);

    // This organisation's admin (and its operator, through this organisation's route) names
    // the other's objects under its own organisation: the same 404 as unknown ones.
    for token in [&admin.token, &tenant.token] {
        app.get(&routes::pool_runners(org, foreign_pool), token)
            .expect(404, "not_found")
            .await;
        app.post_json(
            &routes::pool_runners(org, foreign_pool),
            token,
            &json!({ "name": "x" }),
        )
        .expect(404, "not_found")
        .await;
        app.get(&routes::runner_pools(org, other.workspace_id), token)
            .expect(404, "not_found")
            .await;
        for suffix in ["/disable", "/enable", "/keys", "/webhook-secret/rotate"] {
            let path = format!("{}{suffix}", routes::runner(org, foreign_runner));
            app.post_json(&path, token, &json!({}))
                .expect(404, "not_found")
                .await;
        }
        app.request(
            Method::DELETE,
            &routes::runner_key(org, foreign_runner, foreign_key),
        )
        .bearer_auth(token)
        .json(&json!({}))
        .expect(404, "not_found")
        .await;
        app.request(Method::DELETE, &routes::runner(org, foreign_runner))
            .bearer_auth(token)
            .json(&json!({}))
            .expect(404, "not_found")
            .await;
    }
    // Nothing of the other organisation's runner changed.
    for event in [
        "runner.disabled",
        "runner.key_added",
        "runner.removed",
        "runner.key_revoked",
    ] {
        assert_eq!(
            events_about(&app, event, foreign_runner).await.0,
            0,
            "{event}"
        );
    }
    // A key of one runner named under another runner is not that runner's key.
    let pool = pool(&app, &tenant, &tenant.token).await;
    let own = register(&app, org, pool, &tenant.token).await;
    app.request(
        Method::DELETE,
        &routes::runner_key(org, id(&own["runnerId"]), foreign_key),
    )
    .bearer_auth(&tenant.token)
    .json(&json!({}))
    .expect(404, "not_found")
    .await;
}

#[tokio::test]
async fn a_keyed_registration_gives_its_secrets_to_the_same_token_only() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let colleague = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let pool = pool(&app, &tenant, &admin.token).await;
    let key = format!("k-{}", Uuid::new_v4().simple());
    let body = json!({ "name": "keyed" });
    let keyed = |token: &str| {
        app.post_json(&routes::pool_runners(org, pool), token, &body)
            .header("idempotency-key", key.clone())
    };

    let first: Value = keyed(&admin.token).ok().await;
    let replay: Value = keyed(&admin.token).ok().await;
    assert_eq!(
        first, replay,
        "the same token's retry gets the first answer"
    );
    let runner = id(&first["registration"]["runnerId"]);
    assert_eq!(events_about(&app, "runner.registered", runner).await.0, 1);
    let secret = first["registration"]["webhookSecret"]
        .as_str()
        .unwrap()
        .to_owned();
    let private = first["registration"]["privateKey"]
        .as_str()
        .unwrap()
        .to_owned();

    // Another caller with the same key is not a replay: its own registration, its own secret.
    let theirs: Value = keyed(&colleague.token).ok().await;
    assert_ne!(theirs["registration"]["runnerId"], json!(runner));
    assert_ne!(theirs["registration"]["webhookSecret"], json!(secret));

    // The stored answers are sealed: no secret in clear in the records store.
    let stored: Vec<(Vec<u8>,)> = sql_all!(
        &mut app.db().await,
        (Vec<u8>,),
        "SELECT sealed FROM idempotency_outcomes"
    )
    .unwrap();
    assert!(!stored.is_empty());
    for (sealed,) in &stored {
        let text = String::from_utf8_lossy(sealed);
        assert!(
            !text.contains(&secret) && !text.contains(&private) && !text.contains("whsec_"),
            "a secret in clear in an idempotency outcome"
        );
    }

    // Lowered since, the same token's replay is refused as a fresh request would be.
    app.request(Method::PUT, &routes::user_role(org, admin.user_id))
        .bearer_auth(&tenant.token)
        .json(&json!({ "role": "member" }))
        .ok_response()
        .await;
    keyed(&admin.token).expect(403, "forbidden").await;
}
