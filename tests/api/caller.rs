//! `GET /v1/me`: any live token reads who it is, as authentication found it now; a revoked,
//! disabled or unknown one gets the 401 every operation gives.

use control_plane::domain::{CorrelationId, Role, Scope};
use serde_json::json;

use crate::support::{Call, assert_api_error, routes, tenant_app};

#[tokio::test]
async fn any_live_token_reads_who_it_is() {
    let (app, tenant) = tenant_app().await;
    let member = app.member_of(&tenant).await;
    // No scope at all: asking who one is needs none.
    let token = app.scoped_token(&member, &[]).await;
    let body: serde_json::Value = app.get(routes::ME, &token).ok().await;
    let caller = &body["caller"];
    assert_eq!(caller["userId"], json!(member.user_id));
    assert_eq!(caller["organisationId"], json!(member.organisation_id));
    assert_eq!(caller["role"], "member");
    assert_eq!(caller["scopes"], json!([]));
    assert_eq!(caller["workspaceIds"], json!([member.workspace_id]));
    assert!(caller["tokenId"].is_string() && caller["expiresAt"].is_string());

    let operator: serde_json::Value = app.get(routes::ME, &tenant.token).ok().await;
    assert_eq!(operator["caller"]["role"], "operator");
    let scopes = operator["caller"]["scopes"]
        .as_array()
        .expect("scopes")
        .clone();
    assert_eq!(scopes.len(), Scope::ALL.len(), "{scopes:?}");
}

#[tokio::test]
async fn the_answer_is_what_the_token_holds_now() {
    let (app, tenant) = tenant_app().await;
    let cid = CorrelationId::generate();
    app.services
        .set_user_role(tenant.user_id, Role::Member, &cid)
        .await
        .expect("role");
    let body: serde_json::Value = app.get(routes::ME, &tenant.token).ok().await;
    assert_eq!(body["caller"]["role"], "member");
    let scopes: Vec<&str> = body["caller"]["scopes"]
        .as_array()
        .expect("scopes")
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    assert!(
        !scopes.iter().any(|s| s.starts_with("admin:")),
        "{scopes:?}"
    );
    assert!(scopes.contains(&"activity:read"), "{scopes:?}");

    app.services
        .disable_user(tenant.user_id, None, &cid)
        .await
        .expect("disable");
    assert_api_error(
        app.get(routes::ME, &tenant.token).response().await,
        401,
        "unauthenticated",
    )
    .await;
    assert_api_error(
        app.get(routes::ME, "cpat_not_a_real_token")
            .response()
            .await,
        401,
        "unauthenticated",
    )
    .await;
}
