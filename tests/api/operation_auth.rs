//! Every v1 operation authenticates before anything else and asks for its own scope: 401 without
//! a credential, 403 with a token that holds every scope but the one it needs. The runner route
//! takes no bearer token: only a signature.

use control_plane::domain::{CorrelationId, Scope};
use reqwest::{Method, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Call, Tenant, TestApp, assert_api_error, routes, tenant_app};

/// One bearer route with a body that would succeed, against real resources.
struct Route {
    method: Method,
    path: String,
    scope: Scope,
    body: Option<Value>,
}

#[tokio::test]
async fn every_bearer_operation_needs_a_token_and_its_own_scope() {
    let (app, tenant) = tenant_app().await;
    let routes = bearer_routes(&app, &tenant).await;

    for route in &routes {
        let label = format!("{} {}", route.method, route.path);
        assert_api_error(send(&app, route, None).await, 401, "unauthenticated").await;
        assert_api_error(
            send(&app, route, Some("cpat_not_a_real_token")).await,
            401,
            "unauthenticated",
        )
        .await;
        let lacking: Vec<Scope> = Scope::ALL
            .iter()
            .copied()
            .filter(|s| *s != route.scope)
            .collect();
        let token = app
            .admin_token(&tenant, &lacking, &[tenant.workspace_id], &[])
            .await;
        let response = send(&app, route, Some(&token)).await;
        let err = assert_api_error(response, 403, "forbidden").await;
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(route.scope.as_str())),
            "{label}: the refusal names the missing scope: {err}"
        );
    }

    // The refused requests changed nothing: each one still succeeds with the scope.
    for route in &routes {
        let response = send(&app, route, Some(&tenant.token)).await;
        assert_eq!(
            response.status(),
            200,
            "{} {} with every scope",
            route.method,
            route.path
        );
    }
}

#[tokio::test]
async fn the_runner_route_takes_a_signature_not_a_bearer_token() {
    let (app, tenant) = tenant_app().await;
    let path = routes::delivery_status(Uuid::new_v4());
    let body = json!({"status": "received"});
    app.request(Method::POST, &path)
        .json(&body)
        .expect(401, "invalid_signature")
        .await;
    app.post_json(&path, &tenant.token, &body)
        .expect(401, "invalid_signature")
        .await;
}

async fn send(app: &TestApp, route: &Route, token: Option<&str>) -> Response {
    let mut request = app.request(route.method.clone(), &route.path);
    if let Some(body) = &route.body {
        request = request.json(body);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.response().await
}

/// The bearer routes of the v1 operations, each with what it needs to succeed.
async fn bearer_routes(app: &TestApp, tenant: &Tenant) -> Vec<Route> {
    let cid = CorrelationId::generate();
    let ws = tenant.workspace_id;
    let org = tenant.organisation_id;
    // Two pools: commands go to one, the other is deleted.
    let commands_pool = app
        .services
        .create_pool(
            ws,
            "commands",
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await
        .expect("pool")
        .id;
    let doomed_pool = app
        .services
        .create_pool(
            ws,
            "doomed",
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await
        .expect("pool")
        .id;
    let workflow = app
        .services
        .create_workflow(
            ws,
            "deploy",
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await
        .expect("workflow");
    let revision = app
        .services
        .create_revision(
            workflow.id,
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await
        .expect("revision");
    let plugin = app
        .services
        .create_plugin(
            tenant.organisation_id,
            "linter",
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await
        .expect("plugin")
        .id;
    // A review by another user, for the tenant's user to report.
    let author = app
        .services
        .create_user(
            tenant.organisation_id,
            &format!("author-{}@example.com", Uuid::new_v4().simple()),
            &cid,
        )
        .await
        .expect("user");
    let author_token = app
        .admin_token(
            &Tenant {
                user_id: author.id,
                ..tenant.clone()
            },
            &[Scope::ReviewsWrite],
            &[ws],
            &[],
        )
        .await;
    // Two more of the author's tokens, for the admin plane to rotate and to revoke.
    let mut author_tokens = vec![];
    for _ in 0..2 {
        let secret = app
            .admin_token(
                &Tenant {
                    user_id: author.id,
                    ..tenant.clone()
                },
                &[Scope::ActivityRead],
                &[ws],
                &[],
            )
            .await;
        let me: Value = app.get_ok(routes::ME, &secret).await;
        author_tokens.push(me["caller"]["tokenId"].as_str().unwrap().to_owned());
    }
    let review: Value = app
        .request(Method::PUT, &routes::own_review(plugin))
        .bearer_auth(&author_token)
        .json(&json!({"rating": 4, "title": "Solid plugin", "body": "Does what it says."}))
        .json_body()
        .await;
    let review_id = review["review"]["id"]
        .as_str()
        .expect("review id")
        .to_owned();

    vec![
        Route {
            method: Method::POST,
            path: routes::runner_commands(ws),
            scope: Scope::RunnerCommandsSubmit,
            body: Some(json!({"poolId": commands_pool, "command": "echo"})),
        },
        Route {
            method: Method::DELETE,
            path: routes::runner_pool(ws, doomed_pool),
            scope: Scope::RunnerPoolsDelete,
            body: Some(json!({"reason": "retired"})),
        },
        Route {
            method: Method::GET,
            path: routes::audit_stream(ws),
            scope: Scope::AuditRead,
            body: None,
        },
        Route {
            method: Method::POST,
            path: routes::request_approval(ws, workflow.id, revision.id),
            scope: Scope::WorkflowsRequestApproval,
            body: Some(json!({})),
        },
        Route {
            method: Method::PUT,
            path: routes::own_review(plugin),
            scope: Scope::ReviewsWrite,
            body: Some(json!({"rating": 5, "title": "Great", "body": "Works well for us."})),
        },
        Route {
            method: Method::POST,
            path: routes::report_review(plugin, review_id),
            scope: Scope::ReviewsReport,
            body: Some(json!({"reason": "spam"})),
        },
        // The admin plane: the instance's organisations, this organisation's directory.
        Route {
            method: Method::GET,
            path: routes::ORGANISATIONS.into(),
            scope: Scope::AdminRead,
            body: None,
        },
        Route {
            method: Method::POST,
            path: routes::ORGANISATIONS.into(),
            scope: Scope::AdminWrite,
            body: Some(json!({"name": format!("org-{}", Uuid::new_v4().simple())})),
        },
        Route {
            method: Method::GET,
            path: routes::workspaces(org),
            scope: Scope::AdminRead,
            body: None,
        },
        Route {
            method: Method::POST,
            path: routes::workspaces(org),
            scope: Scope::AdminWrite,
            body: Some(json!({"name": "staging"})),
        },
        Route {
            method: Method::GET,
            path: routes::environments(org, ws),
            scope: Scope::AdminRead,
            body: None,
        },
        Route {
            method: Method::POST,
            path: routes::environments(org, ws),
            scope: Scope::AdminWrite,
            body: Some(json!({"name": "production"})),
        },
        // The admin plane's users, on the review's author (a member).
        Route {
            method: Method::GET,
            path: routes::users(org),
            scope: Scope::AdminRead,
            body: None,
        },
        Route {
            method: Method::GET,
            path: routes::user(org, author.id),
            scope: Scope::AdminRead,
            body: None,
        },
        Route {
            method: Method::POST,
            path: routes::users(org),
            scope: Scope::AdminWrite,
            body: Some(json!({"email": format!("new-{}@example.com", Uuid::new_v4().simple())})),
        },
        Route {
            method: Method::POST,
            path: routes::disable_user(org, author.id),
            scope: Scope::AdminWrite,
            body: Some(json!({"reason": "left"})),
        },
        Route {
            method: Method::POST,
            path: routes::enable_user(org, author.id),
            scope: Scope::AdminWrite,
            body: Some(json!({})),
        },
        Route {
            method: Method::PUT,
            path: routes::user_role(org, author.id),
            scope: Scope::AdminWrite,
            body: Some(json!({"role": "admin"})),
        },
        // The admin plane's tokens, on the author's.
        Route {
            method: Method::POST,
            path: routes::user_tokens(org, author.id),
            scope: Scope::AdminWrite,
            body: Some(json!({
                "name": "by-an-admin",
                "scopes": ["activity:read"],
                "workspaceIds": [ws],
            })),
        },
        Route {
            method: Method::GET,
            path: routes::tokens(org),
            scope: Scope::AdminRead,
            body: None,
        },
        Route {
            method: Method::GET,
            path: routes::token(org, &author_tokens[0]),
            scope: Scope::AdminRead,
            body: None,
        },
        Route {
            method: Method::POST,
            path: routes::rotate_token(org, &author_tokens[0]),
            scope: Scope::AdminWrite,
            body: Some(json!({})),
        },
        Route {
            method: Method::POST,
            path: routes::admin_revoke_token(org, &author_tokens[1]),
            scope: Scope::AdminWrite,
            body: Some(json!({"reason": "left"})),
        },
    ]
}

/// The order docs/decisions.md states: a malformed body is refused (400) before the policy is asked,
/// so a token without the scope learns nothing more than one with it.
#[tokio::test]
async fn a_malformed_body_is_400_before_a_missing_scope_is_403() {
    let (app, tenant) = tenant_app().await;
    let lacking: Vec<Scope> = Scope::ALL
        .iter()
        .copied()
        .filter(|s| *s != Scope::TokensIssue)
        .collect();
    let token = app
        .admin_token(&tenant, &lacking, &[tenant.workspace_id], &[])
        .await;
    app.request(Method::POST, routes::ISSUE_TOKEN)
        .bearer_auth(&token)
        .json(&json!({ "name": "" }))
        .expect(400, "validation_failed")
        .await;
    app.request(Method::POST, routes::ISSUE_TOKEN)
        .bearer_auth(&token)
        .json(&json!({
            "name": "ordered",
            "scopes": ["activity:read"],
            "organisationId": tenant.organisation_id,
            "workspaceIds": [tenant.workspace_id],
        }))
        .expect(403, "forbidden")
        .await;
}
