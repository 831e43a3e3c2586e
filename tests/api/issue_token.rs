use chrono::{DateTime, Utc};
use control_plane::domain::Scope;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    Call, TestDb, assert_api_error, issuance_body, routes, spawn_app_with, sql_all, sql_one,
    tenant_app,
};

const CREDENTIAL_FIELDS: [&str; 10] = [
    "createdAt",
    "environmentIds",
    "expiresAt",
    "id",
    "name",
    "organisationId",
    "prefix",
    "scopes",
    "token",
    "workspaceIds",
];

#[tokio::test]
async fn issues_exactly_the_envelope_with_defaults() {
    let (app, tenant) = tenant_app().await;
    let body = issuance_body(&tenant);
    let response = app.issue(&tenant.token, &body).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-correlation-id"));
    assert!(!response.headers().contains_key("idempotency-replayed"));
    let envelope: Value = response.json().await.unwrap();
    assert_eq!(
        envelope.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["credential"]
    );
    let credential = &envelope["credential"];
    let mut keys: Vec<&str> = credential
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(keys, CREDENTIAL_FIELDS);
    assert_eq!(credential["name"], body["name"]);
    assert_eq!(credential["scopes"], json!(["activity:read"]));
    assert_eq!(credential["organisationId"], json!(tenant.organisation_id));
    assert_eq!(credential["workspaceIds"], json!([tenant.workspace_id]));
    assert_eq!(credential["environmentIds"], json!([]));
    let created: DateTime<Utc> = credential["createdAt"].as_str().unwrap().parse().unwrap();
    let expires: DateTime<Utc> = credential["expiresAt"].as_str().unwrap().parse().unwrap();
    assert_eq!(expires - created, chrono::Duration::days(30));
    let token = credential["token"].as_str().unwrap();
    let prefix = credential["prefix"].as_str().unwrap();
    assert!(
        prefix.starts_with("cpat_") && token.starts_with(prefix) && token.len() > prefix.len() + 30
    );

    // The new token authenticates, with just the scope it was given.
    app.get(&routes::activity(tenant.workspace_id), token)
        .ok_response()
        .await;
    let denied = app.issue(token, &issuance_body(&tenant)).await;
    assert_api_error(denied, 403, "forbidden").await;
}

#[tokio::test]
async fn expires_in_days_boundaries() {
    let (app, tenant) = tenant_app().await;
    for (value, status) in [
        (json!(1), 200),
        (json!(90), 200),
        (json!(0), 400),
        (json!(91), 400),
        (json!(-1), 400),
    ] {
        let mut body = issuance_body(&tenant);
        body["expiresInDays"] = value.clone();
        let response = app.issue(&tenant.token, &body).await;
        if status == 200 {
            let credential: Value = response.json().await.unwrap();
            let created: DateTime<Utc> = credential["credential"]["createdAt"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            let expires: DateTime<Utc> = credential["credential"]["expiresAt"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            if value == json!(90) {
                // Capped at the caller's expiry (its token is 90 days old at most).
                let caller = app.services.authenticate(&tenant.token).await.unwrap();
                assert_eq!(expires, caller.expires_at);
            } else {
                assert_eq!((expires - created).num_days(), value.as_i64().unwrap());
            }
        } else {
            let err = assert_api_error(response, 400, "validation_failed").await;
            assert_eq!(err["error"]["details"]["field"], "expiresInDays", "{value}");
        }
    }
    for bad in [json!("30"), json!(1.5), json!(null), json!(true)] {
        let mut body = issuance_body(&tenant);
        body["expiresInDays"] = bad.clone();
        let err = assert_api_error(
            app.issue(&tenant.token, &body).await,
            400,
            "validation_failed",
        )
        .await;
        assert_eq!(err["error"]["details"]["field"], "expiresInDays", "{bad}");
    }
}

#[tokio::test]
async fn name_boundaries_count_characters() {
    let (app, tenant) = tenant_app().await;
    for (name, ok) in [
        ("a".to_owned(), true),
        ("é".repeat(120), true),
        ("n".repeat(120), true),
        (String::new(), false),
        ("n".repeat(121), false),
    ] {
        let mut body = issuance_body(&tenant);
        body["name"] = json!(name);
        let response = app.issue(&tenant.token, &body).await;
        if ok {
            assert_eq!(response.status(), 200, "{} chars", name.chars().count());
        } else {
            let err = assert_api_error(response, 400, "validation_failed").await;
            assert_eq!(err["error"]["details"]["field"], "name");
        }
    }
}

#[tokio::test]
async fn every_field_constraint_is_a_400_naming_the_field() {
    let (app, tenant) = tenant_app().await;
    type Mutation = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "name",
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("name");
            }),
        ),
        ("name", Box::new(|b| b["name"] = json!(42))),
        (
            "scopes",
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("scopes");
            }),
        ),
        ("scopes", Box::new(|b| b["scopes"] = json!("activity:read"))),
        (
            "scopes[1]",
            Box::new(|b| b["scopes"] = json!(["activity:read", "admin:everything"])),
        ),
        ("scopes[0]", Box::new(|b| b["scopes"] = json!([7]))),
        (
            "organisationId",
            Box::new(|b| b["organisationId"] = json!("not-a-uuid")),
        ),
        (
            "organisationId",
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("organisationId");
            }),
        ),
        ("workspaceIds", Box::new(|b| b["workspaceIds"] = json!([]))),
        (
            "workspaceIds",
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("workspaceIds");
            }),
        ),
        (
            "workspaceIds[0]",
            Box::new(|b| b["workspaceIds"] = json!(["nope"])),
        ),
        (
            "environmentIds[0]",
            Box::new(|b| b["environmentIds"] = json!(["nope"])),
        ),
        (
            "environmentIds",
            Box::new(|b| b["environmentIds"] = json!(null)),
        ),
        ("owner", Box::new(|b| b["owner"] = json!("me"))),
    ];
    for (field, mutate) in cases {
        let mut body = issuance_body(&tenant);
        mutate(&mut body);
        let err = assert_api_error(
            app.issue(&tenant.token, &body).await,
            400,
            "validation_failed",
        )
        .await;
        assert_eq!(err["error"]["details"]["field"], field, "{body}");
    }
    // An unknown scope names the offending value.
    let mut body = issuance_body(&tenant);
    body["scopes"] = json!(["admin:everything"]);
    let err = assert_api_error(
        app.issue(&tenant.token, &body).await,
        400,
        "validation_failed",
    )
    .await;
    assert_eq!(
        err["error"]["details"]["errors"][0]["value"],
        "admin:everything"
    );
}

#[tokio::test]
async fn an_empty_scope_list_is_allowed_and_duplicates_collapse() {
    let (app, tenant) = tenant_app().await;
    let mut body = issuance_body(&tenant);
    body["scopes"] = json!([]);
    assert_eq!(app.issue(&tenant.token, &body).await.status(), 200);
    let mut body = issuance_body(&tenant);
    body["scopes"] = json!(["audit:read", "activity:read", "audit:read"]);
    body["workspaceIds"] = json!([tenant.workspace_id, tenant.workspace_id]);
    let credential: Value = app.issue(&tenant.token, &body).await.json_body().await;
    assert_eq!(
        credential["credential"]["scopes"],
        json!(["audit:read", "activity:read"])
    );
    assert_eq!(
        credential["credential"]["workspaceIds"],
        json!([tenant.workspace_id])
    );
}

#[tokio::test]
async fn issuance_never_escalates() {
    let (app, tenant) = tenant_app().await;
    let second_ws = app.create_workspace(tenant.organisation_id, "second").await;
    let other = app.bootstrap().await;
    // A caller with tokens:issue and activity:read on the first workspace only.
    let caller = app
        .scoped_token(&tenant, &[Scope::TokensIssue, Scope::ActivityRead])
        .await;

    let mut body = issuance_body(&tenant);
    body["scopes"] = json!(["activity:read", "audit:read"]);
    let err = assert_api_error(app.issue(&caller, &body).await, 403, "forbidden").await;
    assert_eq!(err["error"]["details"]["scopes"], json!(["audit:read"]));

    let mut body = issuance_body(&tenant);
    body["workspaceIds"] = json!([tenant.workspace_id, second_ws]);
    assert_api_error(app.issue(&caller, &body).await, 403, "forbidden").await;

    // Another organisation is a 404, as if it did not exist (tests/api/lineage.rs compares).
    let mut body = issuance_body(&tenant);
    body["organisationId"] = json!(other.organisation_id);
    assert_api_error(app.issue(&caller, &body).await, 404, "not_found").await;

    let mut body = issuance_body(&tenant);
    body["workspaceIds"] = json!([other.workspace_id]);
    assert_api_error(app.issue(&caller, &body).await, 404, "not_found").await;

    // Without tokens:issue nothing can be issued at all.
    let reader = app.scoped_token(&tenant, &[Scope::ActivityRead]).await;
    assert_api_error(
        app.issue(&reader, &issuance_body(&tenant)).await,
        403,
        "forbidden",
    )
    .await;
}

#[tokio::test]
async fn a_caller_limited_to_environments_stays_within_them() {
    let (app, tenant) = tenant_app().await;
    let staging = app.create_environment(tenant.workspace_id, "staging").await;
    let prod = app.create_environment(tenant.workspace_id, "prod").await;
    let caller = app
        .admin_token(
            &tenant,
            &[Scope::TokensIssue, Scope::ActivityRead],
            &[tenant.workspace_id],
            &[staging],
        )
        .await;

    let mut body = issuance_body(&tenant);
    body["environmentIds"] = json!([staging]);
    assert_eq!(app.issue(&caller, &body).await.status(), 200);
    let mut body = issuance_body(&tenant);
    body["environmentIds"] = json!([prod]);
    assert_api_error(app.issue(&caller, &body).await, 403, "forbidden").await;
    // No environments means all of them: wider than the caller's.
    assert_api_error(
        app.issue(&caller, &issuance_body(&tenant)).await,
        403,
        "forbidden",
    )
    .await;
}

#[tokio::test]
async fn unknown_references_are_404() {
    let (app, tenant) = tenant_app().await;
    let second_ws = app.create_workspace(tenant.organisation_id, "second").await;
    let env_of_second = app.create_environment(second_ws, "elsewhere").await;
    let cases = [
        ("organisationId", json!(Uuid::new_v4())),
        ("workspaceIds", json!([Uuid::new_v4()])),
        ("environmentIds", json!([Uuid::new_v4()])),
        // An environment outside the given workspaces.
        ("environmentIds", json!([env_of_second])),
    ];
    for (field, value) in cases {
        let mut body = issuance_body(&tenant);
        body[field] = value;
        let err = assert_api_error(app.issue(&tenant.token, &body).await, 404, "not_found").await;
        assert_eq!(err["error"]["details"]["field"], field);
    }
}

#[tokio::test]
async fn a_duplicate_active_name_is_409_until_revoked() {
    let (app, tenant) = tenant_app().await;
    let body = issuance_body(&tenant);
    let first: Value = app.issue(&tenant.token, &body).await.json_body().await;
    let err = assert_api_error(app.issue(&tenant.token, &body).await, 409, "conflict").await;
    assert_eq!(err["error"]["details"]["field"], "name");

    let id = first["credential"]["id"].as_str().unwrap();
    app.delete_json(
        &routes::revoke_token(tenant.workspace_id, id),
        &tenant.token,
        &json!({"reason": "rotate"}),
    )
    .ok_response()
    .await;
    assert_eq!(app.issue(&tenant.token, &body).await.status(), 200);
}

#[tokio::test]
async fn active_tokens_per_user_are_capped() {
    let app = spawn_app_with(|c| c.max_active_tokens_per_user = 3).await;
    let tenant = app.bootstrap().await; // the bootstrap token is the first
    assert_eq!(
        app.issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status(),
        200
    );
    assert_eq!(
        app.issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status(),
        200
    );
    let err = assert_api_error(
        app.issue(&tenant.token, &issuance_body(&tenant)).await,
        409,
        "token_limit_reached",
    )
    .await;
    assert_eq!(err["error"]["details"]["limit"], 3);
}

#[tokio::test]
async fn issuance_writes_its_audit_event_in_each_workspace() {
    let (app, tenant) = tenant_app().await;
    let cid = "audit-check-0001";
    let response = app
        .post_json(routes::ISSUE_TOKEN, &tenant.token, &issuance_body(&tenant))
        .header("x-correlation-id", cid)
        .response()
        .await;
    let credential: Value = response.json().await.unwrap();
    let token_id: Uuid = credential["credential"]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let rows = sql_all!(
        &mut app.db().await,
        (String, Option<Uuid>, String, String),
        "SELECT event_type, workspace_id, correlation_id, CAST(data AS TEXT) FROM audit_events
         WHERE target_id = $1",
        token_id
    )
    .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].0, "token.issued");
    assert_eq!(rows[0].1, Some(tenant.workspace_id));
    assert_eq!(rows[0].2, cid);
    let data: Value = serde_json::from_str(&rows[0].3).expect("event data is JSON");
    assert_eq!(data["tokenId"], token_id.to_string(), "{data}");
    assert!(
        !rows[0]
            .3
            .contains(credential["credential"]["token"].as_str().unwrap())
    );
}

async fn row_counts(db: &mut TestDb) -> (i64, i64) {
    sql_one!(
        db,
        (i64, i64),
        "SELECT (SELECT count(*) FROM tokens), (SELECT count(*) FROM audit_events)"
    )
    .unwrap()
}

#[tokio::test]
async fn a_failed_issuance_writes_nothing() {
    let (app, tenant) = tenant_app().await;
    let mut db = app.db().await;
    let before = row_counts(&mut db).await;
    let body = issuance_body(&tenant);
    assert_eq!(app.issue(&tenant.token, &body).await.status(), 200);
    assert_eq!(app.issue(&tenant.token, &body).await.status(), 409);
    assert_eq!(row_counts(&mut db).await, (before.0 + 1, before.1 + 1));
}
