use std::collections::HashSet;

use control_plane::domain::Scope;
use serde_json::Value;

use crate::support::{Call, issuance_body, routes, tenant_app};

#[tokio::test]
async fn pages_newest_first_with_an_opaque_cursor() {
    let (app, tenant) = tenant_app().await;
    for _ in 0..6 {
        assert_eq!(
            app.issue(&tenant.token, &issuance_body(&tenant))
                .await
                .status(),
            200
        );
    }
    // workspace.created + bootstrap token.issued + 6 issuances = 8 events.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("{}?limit=3", routes::activity(tenant.workspace_id));
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let page: Value = app.get(&path, &tenant.token).json_body().await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 3);
        seen.extend(items.iter().map(|i| i["sequence"].as_i64().unwrap()));
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => {
                assert!(page["nextCursor"].is_null());
                break;
            }
        }
    }
    assert_eq!(seen, (1..=8).rev().collect::<Vec<i64>>());
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 8);
}

#[tokio::test]
async fn items_carry_type_actor_target_and_correlation() {
    let (app, tenant) = tenant_app().await;
    app.post_json(routes::ISSUE_TOKEN, &tenant.token, &issuance_body(&tenant))
        .header("x-correlation-id", "activity-item-1")
        .response()
        .await;
    let page: Value = app.activity(&tenant, "").await;
    let newest = &page["items"][0];
    assert_eq!(newest["type"], "token.issued");
    assert_eq!(newest["correlationId"], "activity-item-1");
    assert_eq!(newest["actor"]["kind"], "user");
    assert_eq!(newest["actor"]["id"], tenant.user_id.to_string());
    assert_eq!(newest["target"]["kind"], "token");
    assert!(newest["occurredAt"].is_string() && newest["id"].is_string());
    assert!(page["nextCursor"].is_null());
}

#[tokio::test]
async fn limit_and_cursor_are_validated() {
    let (app, tenant) = tenant_app().await;
    let base = routes::activity(tenant.workspace_id);
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=abc", "limit"),
        ("cursor=bogus", "cursor"),
    ] {
        let err = app
            .get(&format!("{base}?{query}"), &tenant.token)
            .expect(400, "validation_failed")
            .await;
        assert_eq!(err["error"]["details"]["field"], field, "{query}");
    }
    for query in ["limit=1", "limit=100", ""] {
        let response = app
            .get(&format!("{base}?{query}"), &tenant.token)
            .response()
            .await;
        assert_eq!(response.status(), 200, "{query}");
    }
    // An empty `cursor=` is documented as absent: the first page.
    let page = |query: &'static str| {
        let request = app.get(&format!("{base}?{query}"), &tenant.token);
        async move {
            let response = request.response().await;
            assert_eq!(response.status(), 200, "{query}");
            response.json::<Value>().await.unwrap()
        }
    };
    let first = page("limit=2").await;
    assert_eq!(first["items"].as_array().unwrap().len(), 2, "{first}");
    assert_eq!(page("limit=2&cursor=").await, first);
}

#[tokio::test]
async fn other_workspaces_and_missing_scope_are_403() {
    let (app, tenant) = tenant_app().await;
    let other = app.bootstrap().await;
    let own_second = app.create_workspace(tenant.organisation_id, "second").await;
    for ws in [
        other.workspace_id.to_string(),
        own_second.to_string(),
        "not-a-uuid".into(),
    ] {
        app.get(&routes::activity(ws), &tenant.token)
            .expect(403, "forbidden")
            .await;
    }
    let no_scope = app.scoped_token(&tenant, &[Scope::AuditRead]).await;
    app.get(&routes::activity(tenant.workspace_id), &no_scope)
        .expect(403, "forbidden")
        .await;
}

#[tokio::test]
async fn the_wire_format_matches_the_documented_schema() {
    let (app, tenant) = tenant_app().await;
    let page: Value = app.activity(&tenant, "").await;
    let doc: Value = app.client.get(app.url("/openapi.json")).json_body().await;
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        keys(&page),
        keys(&schemas["ActivityPageBody"]["properties"])
    );
    let item = &page["items"][0];
    assert_eq!(keys(item), keys(&schemas["ActivityItem"]["properties"]));
    // `tokenId` is left out when no token acted (the contract's two fields then).
    let mut optional = keys(&schemas["ActivityActor"]["properties"]);
    optional.retain(|k| k != "tokenId");
    let mut actor = keys(&item["actor"]);
    actor.retain(|k| k != "tokenId");
    assert_eq!(actor, optional);
    assert_eq!(
        keys(&item["target"]),
        keys(&schemas["ActivityTarget"]["properties"])
    );
}
