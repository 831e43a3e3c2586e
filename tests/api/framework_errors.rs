use reqwest::Method;
use serde_json::json;

use crate::support::{
    Call, assert_api_error, issuance_body, routes, spawn_app, spawn_app_with, tenant_app,
};

#[tokio::test]
async fn unknown_route_is_404_and_wrong_method_405() {
    let app = spawn_app().await;
    assert_api_error(
        app.client.get(app.url("/v1/unknown")).response().await,
        404,
        "not_found",
    )
    .await;
    assert_api_error(
        app.client.get(app.url("/nothing/here")).response().await,
        404,
        "not_found",
    )
    .await;
    app.request(Method::PATCH, routes::ISSUE_TOKEN)
        .expect(405, "method_not_allowed")
        .await;
    app.request(Method::GET, routes::ISSUE_TOKEN)
        .expect(405, "method_not_allowed")
        .await;
}

#[tokio::test]
async fn malformed_json_and_content_types_are_400() {
    let (app, tenant) = tenant_app().await;
    let post = || {
        app.request(Method::POST, routes::ISSUE_TOKEN)
            .bearer_auth(&tenant.token)
    };

    let body = post()
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .expect(400, "invalid_json")
        .await;
    assert!(body["error"]["details"]["line"].is_number());

    post()
        .body(issuance_body(&tenant).to_string())
        .expect(400, "unsupported_media_type")
        .await;

    post()
        .header("content-type", "text/plain")
        .body(issuance_body(&tenant).to_string())
        .expect(400, "unsupported_media_type")
        .await;

    let body = post()
        .header("content-type", "application/json")
        .expect(400, "validation_failed")
        .await;
    assert_eq!(body["error"]["details"]["field"], "body");

    post()
        .json(&json!([issuance_body(&tenant)]))
        .expect(400, "validation_failed")
        .await;
}

#[tokio::test]
async fn oversized_bodies_are_413_declared_or_streamed() {
    let app = spawn_app_with(|c| c.body_limit = 1024).await;
    let tenant = app.bootstrap().await;
    let mut body = issuance_body(&tenant);
    body["name"] = json!("x".repeat(2000));
    let response = app.issue(&tenant.token, &body).await;
    assert_api_error(response, 413, "payload_too_large").await;

    // No Content-Length: the limit holds while the chunked body is read.
    let payload = format!("{{\"name\":\"{}\"}}", "y".repeat(4000));
    let (status, headers, body) =
        raw_chunked_post(&app.address, routes::ISSUE_TOKEN, &tenant.token, &payload).await;
    assert_eq!(status, 413);
    let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(parsed["error"]["code"], "payload_too_large");
    let header_id = headers
        .lines()
        .find_map(|l| l.strip_prefix("x-correlation-id: "))
        .map(str::trim)
        .unwrap();
    assert_eq!(parsed["correlationId"], header_id);
}

/// Sends a chunked POST over a raw socket: reqwest always knows the length of a plain body.
async fn raw_chunked_post(
    address: &str,
    path: &str,
    token: &str,
    payload: &str,
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = address.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    for chunk in payload.as_bytes().chunks(500) {
        request.push_str(&format!(
            "{:x}\r\n{}\r\n",
            chunk.len(),
            String::from_utf8_lossy(chunk)
        ));
    }
    request.push_str("0\r\n\r\n");
    let _ = stream.write_all(request.as_bytes()).await;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        // Join the chunk payloads.
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&tail[..n]);
            rest = &tail[n + 2..];
        }
        out
    } else {
        body.to_owned()
    };
    (status, head.to_ascii_lowercase(), body)
}

#[tokio::test]
async fn credentials_are_checked_before_the_body() {
    let app = spawn_app().await;
    app.request(Method::POST, routes::ISSUE_TOKEN)
        .header("content-type", "application/json")
        .body("not json")
        .expect(401, "unauthenticated")
        .await;
}
