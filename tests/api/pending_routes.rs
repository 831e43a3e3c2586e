use control_plane::domain::Scope;
use reqwest::Method;
use serde_json::json;

use crate::helpers::{assert_api_error, spawn_app};

#[tokio::test]
async fn routes_of_later_operations_authenticate_authorize_then_answer_501() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let routes = [
        (
            Method::DELETE,
            format!("/v1/workspaces/{ws}/runner-pools/p1"),
            Scope::RunnerPoolsDelete,
        ),
        (
            Method::POST,
            format!("/v1/workspaces/{ws}/runner-commands"),
            Scope::RunnerCommandsSubmit,
        ),
        (
            Method::GET,
            format!("/v1/workspaces/{ws}/audit/stream"),
            Scope::AuditRead,
        ),
        (
            Method::POST,
            format!("/v1/workspaces/{ws}/workflows/w/revisions/r/request-approval"),
            Scope::WorkflowsRequestApproval,
        ),
        (
            Method::POST,
            "/v1/marketplace/plugins/p/reviews/r/report".to_owned(),
            Scope::ReviewsReport,
        ),
        (
            Method::PUT,
            "/v1/marketplace/plugins/p/reviews/me".to_owned(),
            Scope::ReviewsWrite,
        ),
    ];
    let lacking = app
        .admin_token(&tenant, &[Scope::ActivityRead], &[ws], &[])
        .await;
    for (method, path, _scope) in routes {
        let send = |token: Option<&str>| {
            let mut request = app.request(method.clone(), &path).json(&json!({}));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request.send()
        };
        assert_api_error(send(None).await.unwrap(), 401, "unauthenticated").await;
        assert_api_error(send(Some(&lacking)).await.unwrap(), 403, "forbidden").await;
        assert_api_error(
            send(Some(&tenant.token)).await.unwrap(),
            501,
            "not_implemented",
        )
        .await;
    }
    let signed = app
        .request(Method::POST, "/v1/runner/webhook-deliveries/d1/status")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_api_error(signed, 501, "not_implemented").await;
}
