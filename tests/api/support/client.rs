//! Talking to the server under test over HTTP: request builders with a bearer token, and the
//! typed client on top of them ([`Call`]): `.ok::<T>()` asserts a 200 and returns the
//! deserialized body, `.expect(status, code)` asserts an ApiError of docs/contract.md (status,
//! `error.code`, a message, `correlationId` equal to the `x-correlation-id` header).

use reqwest::{Method, RequestBuilder, Response};
use serde::de::DeserializeOwned;
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
        self.post_json(super::routes::ISSUE_TOKEN, token, body)
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

/// The typed client: what a test does with a request or its response, one call each.
///
/// Implemented for a [`RequestBuilder`] (sent first) and for a [`Response`] already received.
/// Every success of `/v1` is a 200 (docs/contract.md), so `ok` asserts exactly that.
#[allow(async_fn_in_trait)] // Test code, never boxed: no `Send` bound to promise.
pub trait Call: Sized {
    /// The response, whatever its status.
    async fn response(self) -> Response;

    /// Asserts a 200 and returns the response, for its headers or raw body.
    async fn ok_response(self) -> Response {
        let response = self.response().await;
        let status = response.status();
        if status != 200 {
            let body = response.text().await.unwrap_or_default();
            panic!("expected 200, got {status}: {body}");
        }
        response
    }

    /// Asserts a 200 and returns its JSON body as `T`.
    async fn ok<T: DeserializeOwned>(self) -> T {
        let response = self.ok_response().await;
        response
            .json()
            .await
            .expect("a 200 body of the expected type")
    }

    /// The JSON body as `T`, whatever the status (the test asserts on it).
    async fn json_body<T: DeserializeOwned>(self) -> T {
        self.response().await.json().await.expect("a JSON body")
    }

    /// Asserts an ApiError with `status` and `code` (see [`assert_api_error`]); returns the body.
    async fn expect(self, status: u16, code: &str) -> Value {
        assert_api_error(self.response().await, status, code).await
    }

    /// The status code alone, for tests that only count or compare statuses.
    async fn status_code(self) -> u16 {
        self.response().await.status().as_u16()
    }
}

impl Call for RequestBuilder {
    async fn response(self) -> Response {
        self.send().await.expect("the request reaches the server")
    }
}

impl Call for Response {
    async fn response(self) -> Response {
        self
    }
}

impl TestApp {
    /// GET `path` as `token`, asserting a 200; its body as `T`.
    pub async fn get_ok<T: DeserializeOwned>(&self, path: &str, token: &str) -> T {
        self.get(path, token).ok().await
    }

    /// POST `body` to `path` as `token`, asserting a 200; its body as `T`.
    pub async fn post_ok<T: DeserializeOwned>(&self, path: &str, token: &str, body: &Value) -> T {
        self.post_json(path, token, body).ok().await
    }

    /// DELETE with `body` at `path` as `token`, asserting a 200; its body as `T`.
    pub async fn delete_ok<T: DeserializeOwned>(&self, path: &str, token: &str, body: &Value) -> T {
        self.delete_json(path, token, body).ok().await
    }
}
