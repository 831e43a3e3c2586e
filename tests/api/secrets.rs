//! Authentication failures, and the promise that no secret reaches a log line.

use control_plane::domain::TokenSecret;
use reqwest::Method;
use serde_json::Value;

use crate::support::{
    Call, assert_api_error, captured_logs, issuance_body, routes, sql_exec, tenant_app,
};

#[tokio::test]
async fn missing_malformed_unknown_and_expired_credentials_are_401() {
    let (app, tenant) = tenant_app().await;
    let path = routes::activity(tenant.workspace_id);

    let response = app.request(Method::GET, &path).response().await;
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    assert_api_error(response, 401, "unauthenticated").await;

    app.request(Method::GET, &path)
        .basic_auth("user", Some("pass"))
        .expect(401, "unauthenticated")
        .await;

    let mut typo = tenant.token.clone();
    let last = typo.pop().unwrap();
    typo.push(if last == 'A' { 'B' } else { 'A' });
    let (_, unknown) = TokenSecret::generate();
    for token in ["garbage", "cpat_", typo.as_str(), unknown.expose()] {
        assert_api_error(
            app.get(&path, token).response().await,
            401,
            "unauthenticated",
        )
        .await;
    }

    // The same token, once expired.
    let issued: Value = app.issued(&tenant).await;
    let secret = issued["credential"]["token"].as_str().unwrap();
    assert_eq!(app.get(&path, secret).response().await.status(), 200);
    let id: uuid::Uuid = issued["credential"]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let expired = sql_exec!(
        &mut app.db().await,
        "UPDATE tokens SET expires_at = $1 WHERE id = $2",
        chrono::Utc::now() - chrono::TimeDelta::seconds(1),
        id
    )
    .unwrap();
    assert_eq!(expired, 1, "the token row was updated");
    assert_api_error(
        app.get(&path, secret).response().await,
        401,
        "unauthenticated",
    )
    .await;
}

#[tokio::test]
async fn no_secret_reaches_the_logs() {
    let (app, tenant) = tenant_app().await;
    let response = app
        .post_json(routes::ISSUE_TOKEN, &tenant.token, &issuance_body(&tenant))
        .header("x-correlation-id", "secret-log-check-1")
        .response()
        .await;
    let issued: Value = response.json().await.unwrap();
    let secret = issued["credential"]["token"].as_str().unwrap().to_owned();
    let (_, wrong) = TokenSecret::generate();
    let _ = app
        .get(&routes::activity("x"), wrong.expose())
        .response()
        .await;
    let _ = app
        .get(&routes::activity("x"), "cpat_not-even-close")
        .response()
        .await;

    let logs = captured_logs();
    // The capture works: this request's line is there, with its prefix...
    assert!(
        logs.contains("secret-log-check-1"),
        "request logged with its correlation id"
    );
    assert!(logs.contains(issued["credential"]["prefix"].as_str().unwrap()));
    // ...and no secret is.
    for leaked in [
        secret.as_str(),
        tenant.token.as_str(),
        wrong.expose(),
        "cpat_not-even-close",
    ] {
        assert!(!logs.contains(leaked), "a secret reached the logs");
    }
}
