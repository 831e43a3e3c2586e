//! The ops endpoints beside the v1 API: /healthz, /readyz and /metrics; what they cost a
//! flooding caller, and the `Allow` header of a 405.

use reqwest::Method;
use serde_json::Value;

use crate::support::{Call, assert_api_error, rate, routes, spawn_app, spawn_app_with};

#[tokio::test]
async fn health_and_readiness_answer_with_a_correlation_id() {
    let app = spawn_app().await;
    for path in ["/healthz", "/readyz"] {
        let response = app.client.get(app.url(path)).response().await;
        assert_eq!(response.status(), 200, "{path}");
        assert!(
            response.headers().contains_key("x-correlation-id"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn metrics_count_requests_by_operation_and_status() {
    let app = spawn_app().await;
    let _ = app
        .client
        .get(app.url(&routes::activity("x")))
        .response()
        .await;
    let text = app.metrics().await;
    assert!(
        text.contains(
            r#"http_requests_total{method="GET",operation="listActivity",status="401"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains("http_request_duration_seconds_bucket"),
        "{text}"
    );
}

#[tokio::test]
async fn openapi_document_states_statuses_and_closed_bodies() {
    let app = spawn_app().await;
    let doc: Value = app.client.get(app.url("/openapi.json")).json_body().await;
    assert_eq!(
        doc["components"]["schemas"]["PersonalAccessTokenInput"]["additionalProperties"],
        false
    );
    assert_eq!(
        doc["components"]["schemas"]["RevokeAccessTokenInput"]["additionalProperties"],
        false
    );
    let statuses: Vec<&str> = doc["paths"]["/v1/personal-access-tokens"]["post"]["responses"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        statuses,
        [
            "200", "400", "401", "403", "404", "409", "413", "429", "500", "503"
        ]
    );
    let activity: Vec<&str> =
        doc["paths"]["/v1/workspaces/{workspaceId}/activity"]["get"]["responses"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
    assert_eq!(
        activity,
        [
            "200", "400", "401", "403", "410", "413", "429", "500", "503"
        ]
    );
    let paths = doc["paths"].as_object().unwrap();
    // One path per route of the operation table (several methods may share one).
    let routes: std::collections::BTreeSet<&str> = control_plane::domain::operation::OPERATIONS
        .iter()
        .map(|op| op.route)
        .collect();
    assert_eq!(paths.len(), routes.len(), "every v1 route is documented");
    assert!(routes.iter().all(|r| paths.contains_key(*r)), "{routes:?}");
    assert!(paths.keys().all(|p| p.starts_with("/v1/")));
    let header = &doc["paths"]["/v1/personal-access-tokens"]["post"]["responses"]["400"]["headers"]
        ["x-correlation-id"];
    assert_eq!(header["required"], true);
}

#[tokio::test]
async fn openapi_document_states_the_contract_headers() {
    let app = spawn_app().await;
    let doc: Value = app.client.get(app.url("/openapi.json")).json_body().await;
    let names = |op: &Value| -> Vec<String> {
        op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["in"] == "header")
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    };
    for (path, methods) in doc["paths"].as_object().unwrap() {
        for (method, op) in methods.as_object().unwrap() {
            let headers = names(op);
            let mutating = method != "get";
            assert_eq!(
                headers.contains(&"Idempotency-Key".to_owned()),
                mutating,
                "{method} {path}: {headers:?}"
            );
            let limited = &op["responses"]["429"]["headers"];
            for h in ["retry-after", "x-ratelimit-limit", "x-ratelimit-remaining"] {
                assert_eq!(limited[h]["required"], true, "{method} {path} 429 {h}");
            }
            assert_eq!(
                op["responses"]["200"]["headers"]["idempotency-replayed"].is_object(),
                mutating,
                "{method} {path}"
            );
        }
    }
    let signed = names(&doc["paths"]["/v1/runner/webhook-deliveries/{deliveryId}/status"]["post"]);
    for h in [
        "x-sandbox-signature",
        "x-sandbox-runner-id",
        "x-sandbox-key-id",
        "x-sandbox-timestamp",
        "x-sandbox-nonce",
    ] {
        assert!(signed.contains(&h.to_owned()), "{h} missing: {signed:?}");
    }
}

#[tokio::test]
async fn docs_ui_is_served() {
    let app = spawn_app().await;
    let response = app.client.get(app.url("/docs")).ok_response().await;
    let html = response.text().await.unwrap();
    assert!(html.contains("SwaggerUIBundle") && html.contains("additionalProperties"));
}

/// The series a counter family has in the metrics text.
fn series<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(family) && l[family.len()..].starts_with('{'))
        .collect()
}

#[tokio::test]
async fn an_invented_method_is_counted_as_other() {
    let app = spawn_app().await;
    for name in ["BREW", "PROPFINDX", "WHEN"] {
        let method = Method::from_bytes(name.as_bytes()).unwrap();
        let response = app.request(method, routes::ISSUE_TOKEN).response().await;
        assert!(response.status().is_client_error(), "{name}");
    }
    let text = app.metrics().await;
    let requests = series(&text, "http_requests_total");
    assert!(
        requests
            .iter()
            .all(|l| !l.contains("BREW") && !l.contains("WHEN")),
        "{requests:?}"
    );
    assert!(
        requests.iter().any(|l| l.contains(r#"method="other""#)),
        "{requests:?}"
    );
}

#[tokio::test]
async fn a_405_says_which_methods_the_route_allows() {
    let app = spawn_app().await;
    for (method, path, allow) in [
        (Method::PATCH, routes::ISSUE_TOKEN, "POST"),
        (
            Method::PUT,
            &routes::activity("7d4c8c0e-0000-4000-8000-000000000001"),
            "GET, HEAD",
        ),
        (Method::POST, "/healthz", "GET, HEAD"),
        (Method::DELETE, "/openapi.json", "GET, HEAD"),
    ] {
        let response = app.request(method.clone(), path).response().await;
        assert_eq!(
            response
                .headers()
                .get("allow")
                .map(|v| v.to_str().unwrap().to_owned()),
            Some(allow.to_owned()),
            "{method} {path}"
        );
        assert_api_error(response, 405, "method_not_allowed").await;
    }
}

#[tokio::test]
async fn ops_routes_are_limited_per_client_address() {
    let app = spawn_app_with(|c| {
        c.ops_rate_limit = rate("5/m");
    })
    .await;
    let mut statuses = Vec::new();
    for path in [
        "/healthz",
        "/metrics",
        "/openapi.json",
        "/readyz",
        "/docs",
        "/healthz",
        "/metrics",
    ] {
        let response = app.client.get(app.url(path)).response().await;
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            assert!(response.headers().contains_key("retry-after"), "{path}");
            assert_api_error(response, 429, "rate_limited").await;
        }
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);
    // The API's budget is another: a request to /v1 is still answered (401, not 429).
    let response = app
        .client
        .get(app.url("/v1/personal-access-tokens/x"))
        .response()
        .await;
    assert_ne!(response.status(), 429);
}

#[tokio::test]
async fn readiness_pings_the_store_at_most_once_a_second_under_a_flood() {
    let app = spawn_app().await;
    let probes: Vec<_> = (0..200)
        .map(|_| app.client.get(app.url("/readyz")).send())
        .collect();
    for response in futures_util::future::join_all(probes).await {
        assert_eq!(response.unwrap().status(), 200);
    }
    let text = app.metrics().await;
    let pings: u64 = series(&text, "readiness_pings_total")
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    // 200 probes in the few seconds they take: one ping a second, never one per probe.
    assert!((1..=10).contains(&pings), "{pings} pings for 200 probes");
}

#[tokio::test]
async fn the_operator_routes_can_have_their_own_listener() {
    let app = spawn_app_with(|c| c.ops_listen = Some("127.0.0.1:0".into())).await;
    let ops = app.ops_address.clone().expect("an ops listener");
    for path in ["/healthz", "/readyz", "/metrics"] {
        let on_ops = app.client.get(format!("{ops}{path}")).response().await;
        assert_eq!(on_ops.status(), 200, "{path} on the ops listener");
        assert!(on_ops.headers().contains_key("x-correlation-id"));
        app.client.get(app.url(path)).expect(404, "not_found").await;
    }
    // The documents stay with the API, whose clients read them.
    app.client.get(app.url("/openapi.json")).ok_response().await;
    let doc = app
        .client
        .get(format!("{ops}/openapi.json"))
        .response()
        .await;
    assert_eq!(doc.status(), 404);
}

/// A request refused before it reaches its route (a 429 from the token's budget, a 401) is
/// counted under its operation, not `other`.
#[tokio::test]
async fn a_refusal_before_routing_is_counted_under_its_operation() {
    let app = spawn_app_with(|c| c.rate_limit = rate("1/m")).await;
    let tenant = app.bootstrap().await;
    let path = routes::activity(tenant.workspace_id);
    let statuses: Vec<u16> = two_statuses(&app, &path, &tenant.token).await;
    assert_eq!(statuses, [200, 429], "the second spends an empty budget");
    let anonymous = app.request(Method::GET, &path).response().await;
    assert_eq!(anonymous.status(), 401);
    let text = app.metrics().await;
    let requests = series(&text, "http_requests_total");
    for status in ["429", "401"] {
        assert!(
            requests
                .iter()
                .any(|l| l.contains(r#"operation="listActivity""#)
                    && l.contains(&format!(r#"status="{status}""#))),
            "{status}: {requests:?}"
        );
    }
    assert!(
        !requests.iter().any(|l| l.contains(r#"operation="other""#)),
        "{requests:?}"
    );
}

async fn two_statuses(app: &crate::support::TestApp, path: &str, token: &str) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..2 {
        statuses.push(app.get(path, token).status_code().await);
    }
    statuses
}
