//! Inputs a hostile client tries: NUL characters, non-canonical uuids, repeated keys and
//! headers, look-alike content types.

use control_plane::domain::{Email, NO_NUL_PATTERN};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Call, assert_api_error, issuance_body, routes, spawn_app, tenant_app};

/// `setShadowPolicy`'s `policy`, as the server states it (http/fields/policy_reference.rs).
const POLICY_REFERENCE_PATTERN: &str = "^[A-Za-z0-9._-]{1,100}@[0-9]{1,9}$";

#[tokio::test]
async fn nul_characters_are_a_400_not_a_storage_error() {
    let (app, tenant) = tenant_app().await;
    let mut body = issuance_body(&tenant);
    body["name"] = json!("bad\u{0}name");
    let err = assert_api_error(
        app.issue(&tenant.token, &body).await,
        400,
        "validation_failed",
    )
    .await;
    assert_eq!(err["error"]["details"]["field"], "name");

    let issued: Value = app.issued(&tenant).await;
    let path = routes::revoke_token(
        tenant.workspace_id,
        issued["credential"]["id"].as_str().unwrap(),
    );
    let err = app
        .delete_json(&path, &tenant.token, &json!({"reason": "x\u{0}"}))
        .expect(400, "validation_failed")
        .await;
    assert_eq!(err["error"]["details"]["field"], "reason");
}

/// The document says what the server refuses: every free-text string of every request body
/// carries the pattern that excludes U+0000 (schemathesis sent NUL to fields that did not).
#[tokio::test]
async fn the_document_states_the_nul_rule_on_every_body_string() {
    let app = spawn_app().await;
    let doc: Value = app.request(Method::GET, "/openapi.json").json_body().await;
    let schemas = &doc["components"]["schemas"];
    let mut checked = Vec::new();
    for op in doc["paths"].as_object().unwrap().values() {
        for op in op.as_object().unwrap().values() {
            let Some(content) = op["requestBody"]["content"].as_object() else {
                continue;
            };
            for media in content.values() {
                // A raw body (the policy upload's component) has no properties to state it on.
                let Some(reference) = media["schema"]["$ref"].as_str() else {
                    assert_eq!(media["schema"]["format"], "binary", "{media}");
                    continue;
                };
                let name = reference.rsplit('/').next();
                let schema = &schemas[name.unwrap()];
                let empty = serde_json::Map::new();
                let properties = schema["properties"].as_object().unwrap_or(&empty);
                for (field, prop) in properties {
                    let prop = if prop["type"] == "array" {
                        &prop["items"]
                    } else {
                        prop
                    };
                    let free_text = prop["type"] == "string"
                        && prop.get("format").is_none()
                        && prop.get("enum").is_none();
                    if free_text {
                        // A field with a shape of its own states it, and that excludes NUL too
                        // (an email address; a policy `NAME@VERSION`, closed character classes).
                        let pattern = prop["pattern"].as_str();
                        assert!(
                            pattern == Some(NO_NUL_PATTERN)
                                || pattern == Some(Email::PATTERN)
                                || pattern == Some(POLICY_REFERENCE_PATTERN),
                            "{name:?}.{field}: {pattern:?}"
                        );
                        checked.push(format!("{}.{field}", name.unwrap()));
                    }
                }
            }
        }
    }
    for expected in [
        "PersonalAccessTokenInput.name",
        "SubmitRunnerCommandInput.command",
        "SubmitRunnerCommandInput.args",
    ] {
        assert!(
            checked.iter().any(|c| c == expected),
            "{expected}: {checked:?}"
        );
    }
}

#[tokio::test]
async fn only_canonical_uuids_are_accepted() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    for form in [
        format!("{{{org}}}"),
        format!("urn:uuid:{org}"),
        org.simple().to_string(),
    ] {
        let mut body = issuance_body(&tenant);
        body["organisationId"] = json!(form);
        let err = assert_api_error(
            app.issue(&tenant.token, &body).await,
            400,
            "validation_failed",
        )
        .await;
        assert_eq!(err["error"]["details"]["field"], "organisationId", "{form}");
    }
    let mut body = issuance_body(&tenant);
    body["organisationId"] = json!(org.to_string().to_uppercase());
    assert_eq!(
        app.issue(&tenant.token, &body).await.status(),
        200,
        "case does not matter"
    );
}

#[tokio::test]
async fn a_repeated_key_is_rejected() {
    let (app, tenant) = tenant_app().await;
    let raw = format!(
        r#"{{"name":"dup","scopes":["activity:read"],"scopes":["tokens:issue"],"organisationId":"{}","workspaceIds":["{}"]}}"#,
        tenant.organisation_id, tenant.workspace_id
    );
    let err = app
        .request(Method::POST, routes::ISSUE_TOKEN)
        .bearer_auth(&tenant.token)
        .header("content-type", "application/json")
        .body(raw)
        .expect(400, "validation_failed")
        .await;
    assert_eq!(err["error"]["details"]["field"], "scopes");
}

#[tokio::test]
async fn repeated_correlation_or_authorization_headers_are_refused() {
    let (app, tenant) = tenant_app().await;
    app.request(Method::GET, "/healthz")
        .header("x-correlation-id", "first-id-0001")
        .header("x-correlation-id", "second-id-0002")
        .expect(400, "validation_failed")
        .await;

    let path = routes::activity(tenant.workspace_id);
    app.request(Method::GET, &path)
        .header("authorization", format!("Bearer {}", tenant.token))
        .header("authorization", "Bearer cpat_other")
        .expect(401, "unauthenticated")
        .await;
}

#[tokio::test]
async fn look_alike_json_media_types_are_refused() {
    let (app, tenant) = tenant_app().await;
    for content_type in [
        "application/merge-patch+json",
        "application/jsonx",
        "text/json",
    ] {
        app.request(Method::POST, routes::ISSUE_TOKEN)
            .bearer_auth(&tenant.token)
            .header("content-type", content_type)
            .body(issuance_body(&tenant).to_string())
            .expect(400, "unsupported_media_type")
            .await;
    }
    let response = app
        .request(Method::POST, routes::ISSUE_TOKEN)
        .bearer_auth(&tenant.token)
        .header("content-type", "application/json; charset=utf-8")
        .body(issuance_body(&tenant).to_string())
        .response()
        .await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn an_event_names_no_other_workspace() {
    let (app, tenant) = tenant_app().await;
    let hidden = app.create_workspace(tenant.organisation_id, "hidden").await;
    let env_hidden = app.create_environment(hidden, "secret-env").await;
    let env_main = app
        .create_environment(tenant.workspace_id, "main-env")
        .await;
    let caller = app
        .admin_token(
            &tenant,
            &control_plane::domain::Scope::ALL,
            &[tenant.workspace_id, hidden],
            &[],
        )
        .await;
    let mut body = issuance_body(&tenant);
    body["workspaceIds"] = json!([tenant.workspace_id, hidden]);
    body["environmentIds"] = json!([env_main, env_hidden]);
    assert_eq!(app.issue(&caller, &body).await.status(), 200);
    let page: Value = app.activity(&tenant, "?limit=1").await;
    let data = &page["items"][0]["data"];
    assert_eq!(data["workspaceCount"], 2);
    assert_eq!(data["environmentIds"], json!([env_main]));
    let text = page.to_string();
    assert!(!text.contains(&hidden.to_string()) && !text.contains(&env_hidden.to_string()));
}
