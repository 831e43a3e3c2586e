use control_plane::domain::CorrelationId;
use reqwest::Method;

use crate::support::{Call, assert_api_error, spawn_app};

#[tokio::test]
async fn a_valid_id_is_echoed_on_success_and_error() {
    let app = spawn_app().await;
    for id in [
        "abcdefgh".to_owned(),
        "A".repeat(128),
        "run-42:step_1.retry".to_owned(),
    ] {
        let ok = app
            .client
            .get(app.url("/healthz"))
            .header("x-correlation-id", &id)
            .response()
            .await;
        assert_eq!(ok.headers()["x-correlation-id"], id.as_str());
        let err = app
            .client
            .get(app.url("/v1/nope"))
            .header("x-correlation-id", &id)
            .response()
            .await;
        assert_eq!(err.headers()["x-correlation-id"], id.as_str());
        let body = assert_api_error(err, 404, "not_found").await;
        assert_eq!(body["correlationId"], id.as_str());
    }
}

#[tokio::test]
async fn an_id_is_generated_when_absent() {
    let app = spawn_app().await;
    let response = app.client.get(app.url("/healthz")).response().await;
    let id = response.headers()["x-correlation-id"].to_str().unwrap();
    assert!(CorrelationId::parse(id).is_ok(), "{id}");
}

#[tokio::test]
async fn an_invalid_id_is_a_400_carrying_a_fresh_one() {
    let app = spawn_app().await;
    for bad in [
        "abcdefg".to_owned(),
        "a".repeat(129),
        "-abcdefgh".to_owned(),
        "abcd efgh".to_owned(),
        "abcd/efgh".to_owned(),
    ] {
        let response = app
            .request(Method::GET, "/healthz")
            .header("x-correlation-id", &bad)
            .response()
            .await;
        let header = response.headers()["x-correlation-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_ne!(header, bad);
        assert!(CorrelationId::parse(&header).is_ok());
        let body = assert_api_error(response, 400, "validation_failed").await;
        assert_eq!(
            body["error"]["details"]["field"], "x-correlation-id",
            "{bad:?}"
        );
    }
}
