//! Organisations, workspaces and environments over the admin API: the operator's instance, an
//! admin's own organisation, and nothing of another's.

use control_plane::domain::{Role, Scope};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Call, event_actor, routes, tenant_app};

const ADMIN: &[Scope] = &[Scope::AdminRead, Scope::AdminWrite];

fn id(value: &Value) -> Uuid {
    serde_json::from_value(value.clone()).expect("an id")
}

#[tokio::test]
async fn organisations_are_the_operators_alone() {
    let (app, tenant) = tenant_app().await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let name = format!("org-{}", Uuid::new_v4().simple());
    app.post_json(
        routes::ORGANISATIONS,
        &admin.token,
        &json!({ "name": name }),
    )
    .expect(403, "forbidden")
    .await;
    app.get(routes::ORGANISATIONS, &admin.token)
        .expect(403, "forbidden")
        .await;

    // The operator (bootstrap's user) creates one and finds it by paging.
    let made: Value = app
        .post_ok(
            routes::ORGANISATIONS,
            &tenant.token,
            &json!({ "name": name }),
        )
        .await;
    let made = id(&made["organisation"]["id"]);
    app.post_json(
        routes::ORGANISATIONS,
        &tenant.token,
        &json!({ "name": name }),
    )
    .expect(409, "conflict")
    .await;
    let mut path = format!("{}?limit=100", routes::ORGANISATIONS);
    let mut found = vec![];
    loop {
        let page: Value = app.get_ok(&path, &tenant.token).await;
        found.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| id(&o["id"])),
        );
        match page["nextCursor"].as_str() {
            Some(cursor) => path = format!("{}?limit=100&cursor={cursor}", routes::ORGANISATIONS),
            None => break,
        }
    }
    assert!(found.contains(&made) && found.contains(&tenant.organisation_id));
}

#[tokio::test]
async fn an_admin_makes_workspaces_and_environments_of_its_own_organisation_only() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let other = app.bootstrap().await;

    let made: Value = app
        .post_ok(
            &routes::workspaces(org),
            &admin.token,
            &json!({ "name": "staging" }),
        )
        .await;
    assert_eq!(made["workspace"]["organisationId"], json!(org));
    let ws = id(&made["workspace"]["id"]);
    let env: Value = app
        .post_ok(
            &routes::environments(org, ws),
            &admin.token,
            &json!({ "name": "eu" }),
        )
        .await;
    assert_eq!(env["environment"]["workspaceId"], json!(ws));
    let listed: Value = app
        .get_ok(&routes::environments(org, ws), &admin.token)
        .await;
    assert_eq!(listed["items"][0]["name"], "eu");
    let workspaces: Value = app.get_ok(&routes::workspaces(org), &admin.token).await;
    let names: Vec<&str> = workspaces["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["main", "staging"], "in creation order");

    // Another organisation, and another organisation's workspace under this one: not found.
    app.post_json(
        &routes::workspaces(other.organisation_id),
        &admin.token,
        &json!({ "name": "x" }),
    )
    .expect(404, "not_found")
    .await;
    app.get(&routes::environments(org, other.workspace_id), &admin.token)
        .expect(404, "not_found")
        .await;
    app.post_json(
        &routes::environments(org, other.workspace_id),
        &tenant.token,
        &json!({ "name": "x" }),
    )
    .expect(404, "not_found")
    .await;
    // The events name who made them.
    let by_admin = ("user".to_owned(), Some(admin.user_id), Some(admin.token_id));
    assert_eq!(event_actor(&app, "workspace.created", ws).await, by_admin);
    let env = id(&env["environment"]["id"]);
    assert_eq!(
        event_actor(&app, "environment.created", env).await,
        by_admin
    );
}
