//! Talking to the server under test over HTTP: request builders with a bearer token, and the
//! assertion of an ApiError of docs/contract.md (status, `error.code`, a message,
//! `correlationId` equal to the `x-correlation-id` header).

use reqwest::{Method, RequestBuilder, Response};
use serde_json::Value;

use super::server::TestApp;

impl TestApp {
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.client.request(method, self.url(path))
    }

    pub fn get(&self, path: &str, token: &str) -> RequestBuilder {
        self.request(Method::GET, path).bearer_auth(token)
    }

    pub fn post_json(&self, path: &str, token: &str, body: &Value) -> RequestBuilder {
        self.request(Method::POST, path)
            .bearer_auth(token)
            .json(body)
    }

    pub fn delete_json(&self, path: &str, token: &str, body: &Value) -> RequestBuilder {
        self.request(Method::DELETE, path)
            .bearer_auth(token)
            .json(body)
    }

    /// Issues a token over HTTP with `body`, returning the response.
    pub async fn issue(&self, token: &str, body: &Value) -> Response {
        self.post_json("/v1/personal-access-tokens", token, body)
            .send()
            .await
            .expect("request")
    }
}

/// Asserts an ApiError: status, code, and `correlationId` equal to the response header.
pub async fn assert_api_error(response: Response, status: u16, code: &str) -> Value {
    assert_eq!(response.status().as_u16(), status, "status");
    let header = response
        .headers()
        .get("x-correlation-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .expect("x-correlation-id header on an error");
    let body: Value = response.json().await.expect("ApiError body is JSON");
    assert_eq!(
        body["correlationId"],
        Value::String(header),
        "correlationId equals the header: {body}"
    );
    assert_eq!(body["error"]["code"], code, "error code in {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "message in {body}"
    );
    body
}

/// What a client can tell an error apart by: status, code, message and details (the
/// correlation id differs on every response). Two answers with equal shapes are
/// indistinguishable.
pub async fn error_shape(response: Response) -> Value {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("ApiError body is JSON");
    serde_json::json!({
        "status": status,
        "code": body["error"]["code"],
        "message": body["error"]["message"],
        "details": body["error"]["details"],
    })
}
