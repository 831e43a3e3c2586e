//! GCRA limits with integer headers; a lower budget for issuance.

use control_plane::config::RateOption;
use control_plane::storage::Rate;

use crate::helpers::{assert_api_error, issuance_body, spawn_app_with};

#[tokio::test]
async fn limited_responses_carry_integer_headers_until_429() {
    let app =
        spawn_app_with(|c| c.rate_limit = RateOption(Some(Rate::parse("3/m").unwrap()))).await;
    let tenant = app.bootstrap().await;
    let path = format!("/v1/workspaces/{}/activity", tenant.workspace_id);
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let response = app.get(&path, &tenant.token).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-ratelimit-limit"], "3");
        remaining.push(
            response.headers()["x-ratelimit-remaining"]
                .to_str()
                .unwrap()
                .parse::<u32>()
                .unwrap(),
        );
    }
    assert_eq!(remaining, [2, 1, 0]);
    let limited = app.get(&path, &tenant.token).send().await.unwrap();
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1, "retry-after in whole seconds, at least 1");
    assert_eq!(limited.headers()["x-ratelimit-remaining"], "0");
    assert_eq!(limited.headers()["x-ratelimit-limit"], "3");
    assert_api_error(limited, 429, "rate_limited").await;

    // Another principal has its own budget.
    let other = app
        .admin_token(
            &tenant,
            &[control_plane::domain::Scope::ActivityRead],
            &[tenant.workspace_id],
            &[],
        )
        .await;
    assert_eq!(app.get(&path, &other).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn issuance_has_its_own_lower_budget() {
    let app =
        spawn_app_with(|c| c.issue_rate_limit = RateOption(Some(Rate::parse("2/m").unwrap())))
            .await;
    let tenant = app.bootstrap().await;
    assert_eq!(
        app.issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status(),
        200
    );
    assert_eq!(
        app.issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status(),
        200
    );
    let limited = app.issue(&tenant.token, &issuance_body(&tenant)).await;
    assert_eq!(limited.headers()["x-ratelimit-limit"], "2");
    assert_api_error(limited, 429, "rate_limited").await;
    // Reads are not spent by issuance.
    let path = format!("/v1/workspaces/{}/activity", tenant.workspace_id);
    assert_eq!(
        app.get(&path, &tenant.token).send().await.unwrap().status(),
        200
    );
}

#[tokio::test]
async fn unauthenticated_requests_are_limited_per_address() {
    let app =
        spawn_app_with(|c| c.rate_limit = RateOption(Some(Rate::parse("2/m").unwrap()))).await;
    for _ in 0..2 {
        let response = app
            .get("/v1/workspaces/x/activity", "cpat_not-a-token")
            .send()
            .await
            .unwrap();
        assert_api_error(response, 401, "unauthenticated").await;
    }
    let response = app
        .get("/v1/workspaces/x/activity", "cpat_not-a-token")
        .send()
        .await
        .unwrap();
    assert_api_error(response, 429, "rate_limited").await;
}
