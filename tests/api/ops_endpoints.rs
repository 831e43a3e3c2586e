//! The ops endpoints beside the v1 API: /healthz, /readyz and /metrics.

use serde_json::Value;

use crate::helpers::spawn_app;

#[tokio::test]
async fn health_and_readiness_answer_with_a_correlation_id() {
    let app = spawn_app().await;
    for path in ["/healthz", "/readyz"] {
        let response = app.client.get(app.url(path)).send().await.unwrap();
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
        .get(app.url("/v1/workspaces/x/activity"))
        .send()
        .await
        .unwrap();
    let text = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
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
    let doc: Value = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
        ["200", "400", "401", "403", "413", "429", "500", "503"]
    );
    let paths = doc["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 10, "every v1 route is documented");
    assert!(paths.keys().all(|p| p.starts_with("/v1/")));
    let header = &doc["paths"]["/v1/personal-access-tokens"]["post"]["responses"]["400"]["headers"]
        ["x-correlation-id"];
    assert_eq!(header["required"], true);
}

#[tokio::test]
async fn openapi_document_states_the_contract_headers() {
    let app = spawn_app().await;
    let doc: Value = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
    let response = app.client.get(app.url("/docs")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let html = response.text().await.unwrap();
    assert!(html.contains("SwaggerUIBundle") && html.contains("additionalProperties"));
}
