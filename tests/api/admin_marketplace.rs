//! The plugins an organisation publishes over the admin API: its admin creates and lists them
//! and lists and restores their reviews; another organisation's plugin is a 404 that changes
//! nothing; every change names the user and token that made it.

use control_plane::domain::{Role, Scope};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::reviews::hidden_review;
use crate::support::{Call, event_actor, events_about, routes, tenant_app};

const ADMIN: &[Scope] = &[Scope::AdminRead, Scope::AdminWrite];

fn plugin_name() -> String {
    format!("plugin-{}", Uuid::new_v4().simple())
}

#[tokio::test]
async fn an_admin_publishes_plugins_and_restores_a_hidden_review() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let key = format!("k-{}", Uuid::new_v4().simple());
    let name = plugin_name();
    let create = || {
        app.post_json(
            &routes::plugins(org),
            &admin.token,
            &json!({ "name": name }),
        )
        .header("idempotency-key", key.clone())
    };
    let created: Value = create().ok().await;
    let replay: Value = create().ok().await;
    assert_eq!(created, replay, "a keyed creation runs once");
    assert_eq!(created["plugin"]["organisationId"], json!(org));
    let plugin: Uuid = serde_json::from_value(created["plugin"]["id"].clone()).unwrap();
    assert_eq!(events_about(&app, "plugin.created", plugin).await.0, 1);
    assert_eq!(
        event_actor(&app, "plugin.created", plugin).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id))
    );
    app.post_json(
        &routes::plugins(org),
        &admin.token,
        &json!({ "name": name }),
    )
    .expect(409, "conflict")
    .await;
    let listed: Value = app.get_ok(&routes::plugins(org), &admin.token).await;
    assert_eq!(listed["items"], json!([created["plugin"]]));

    // A review hidden after reports: listed with its status, then restored.
    let review: Uuid = hidden_review(&app, &tenant, plugin).await.parse().unwrap();
    let reviews: Value = app
        .get_ok(&routes::plugin_reviews(org, plugin), &admin.token)
        .await;
    assert_eq!(reviews["items"][0]["id"], json!(review));
    assert_eq!(reviews["items"][0]["status"], "hidden");
    let restored: Value = app
        .post_ok(
            &routes::restore_review(org, plugin, review),
            &admin.token,
            &json!({ "reason": "the reports were unfounded" }),
        )
        .await;
    assert_eq!(restored["review"]["status"], "published");
    assert_eq!(
        event_actor(&app, "review.restored", review).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id))
    );
    // Only a hidden review is restored.
    app.post_json(
        &routes::restore_review(org, plugin, review),
        &admin.token,
        &json!({}),
    )
    .expect(409, "invalid_transition")
    .await;
}

#[tokio::test]
async fn another_organisation_s_plugins_are_not_found() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let created: Value = app
        .post_ok(
            &routes::plugins(org),
            &tenant.token,
            &json!({ "name": plugin_name() }),
        )
        .await;
    let plugin: Uuid = serde_json::from_value(created["plugin"]["id"].clone()).unwrap();
    let review: Uuid = hidden_review(&app, &tenant, plugin).await.parse().unwrap();
    let other = app.bootstrap().await;
    let foreign = app.user_in_role(&other, Role::Admin, ADMIN).await;
    let theirs = other.organisation_id;

    // Its own organisation's list does not show this one's plugin.
    let listed: Value = app.get_ok(&routes::plugins(theirs), &foreign.token).await;
    assert_eq!(listed["items"], json!([]));
    for (o, token) in [
        (theirs, &foreign.token),
        (org, &foreign.token),
        (theirs, &other.token),
    ] {
        app.get(&routes::plugin_reviews(o, plugin), token)
            .expect(404, "not_found")
            .await;
        app.post_json(
            &routes::restore_review(o, plugin, review),
            token,
            &json!({}),
        )
        .expect(404, "not_found")
        .await;
    }
    assert_eq!(events_about(&app, "review.restored", review).await.0, 0);
    // A review of another plugin is not this plugin's.
    let second: Value = app
        .post_ok(
            &routes::plugins(org),
            &tenant.token,
            &json!({ "name": plugin_name() }),
        )
        .await;
    let second: Uuid = serde_json::from_value(second["plugin"]["id"].clone()).unwrap();
    app.post_json(
        &routes::restore_review(org, second, review),
        &tenant.token,
        &json!({}),
    )
    .expect(404, "not_found")
    .await;
}

#[tokio::test]
async fn the_role_table_decides_every_plugin_operation() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let created: Value = app
        .post_ok(
            &routes::plugins(org),
            &tenant.token,
            &json!({ "name": plugin_name() }),
        )
        .await;
    let plugin: Uuid = serde_json::from_value(created["plugin"]["id"].clone()).unwrap();
    let other = app.bootstrap().await;
    let foreign_admin = app.user_in_role(&other, Role::Admin, ADMIN).await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let reader = app
        .user_in_role(&tenant, Role::Admin, &[Scope::AdminRead])
        .await;
    let member = app
        .user_in_role(&tenant, Role::Member, &[Scope::ReviewsWrite])
        .await;
    let routes: Vec<(Method, String, Value)> = vec![
        (Method::GET, routes::plugins(org), Value::Null),
        (
            Method::GET,
            routes::plugin_reviews(org, plugin),
            Value::Null,
        ),
        (
            Method::POST,
            routes::plugins(org),
            json!({ "name": plugin_name() }),
        ),
        (
            Method::POST,
            routes::restore_review(org, plugin, Uuid::new_v4()),
            json!({}),
        ),
    ];
    let status_of = async |token: &str, (method, path, body): &(Method, String, Value)| {
        let mut request = app.request(method.clone(), path).bearer_auth(token);
        if !body.is_null() {
            request = request.json(body);
        }
        request.status_code().await
    };
    for route in &routes {
        let label = format!("{} {}", route.0, route.1);
        let restore = route.1.ends_with("/restore");
        assert_eq!(
            status_of(&member.token, route).await,
            403,
            "member: {label}"
        );
        assert_eq!(
            status_of(&foreign_admin.token, route).await,
            404,
            "another organisation's admin: {label}"
        );
        let read = route.0 == Method::GET;
        assert_eq!(
            status_of(&reader.token, route).await,
            if read { 200 } else { 403 },
            "admin:read only: {label}"
        );
        // Let through, the unknown review of the restore is a 404 of its own.
        let allowed = if restore { 404 } else { 200 };
        for (who, token) in [("admin", &admin.token), ("operator", &other.token)] {
            let expected = if route.0 == Method::POST && !restore {
                200
            } else {
                allowed
            };
            let status = if who == "operator" && route.0 == Method::POST && !restore {
                // A second creation of the same name is a conflict: another name.
                let fresh = (
                    route.0.clone(),
                    route.1.clone(),
                    json!({ "name": plugin_name() }),
                );
                status_of(token, &fresh).await
            } else {
                status_of(token, route).await
            };
            assert_eq!(status, expected, "{who}: {label}");
        }
    }
}
