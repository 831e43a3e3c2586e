//! One time format everywhere: every time in a response body, an activity item (and its
//! `data`) and a stream event is RFC 3339 in UTC with `Z` and exactly six fraction digits.

use std::collections::BTreeSet;

use control_plane::domain::Scope;
use reqwest::Response;
use serde_json::{Value, json};

use crate::support::runner as signatures;
use crate::support::sse::Sse;
use crate::support::{Call, issuance_body, routes};
use crate::{reviews, workflows};

/// `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`, spelled as a template: `d` is any digit.
fn is_api_time(s: &str) -> bool {
    const TEMPLATE: &[u8] = b"dddd-dd-ddTdd:dd:dd.ddddddZ";
    s.len() == TEMPLATE.len()
        && s.bytes().zip(TEMPLATE).all(|(c, &t)| match t {
            b'd' => c.is_ascii_digit(),
            _ => c == t,
        })
}

/// Something a client would take for a time: a date, then `T`.
fn looks_like_a_time(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 11
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
}

/// Walks `value`, checking every property named `…At` and every time-like string; returns the
/// paths of the times seen (array indexes as `[]`).
fn check_times(path: &str, value: &Value, seen: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let inner = format!("{path}.{key}");
                if key.ends_with("At") && !v.is_null() {
                    let s = v
                        .as_str()
                        .unwrap_or_else(|| panic!("{inner} is not a string: {v}"));
                    assert!(is_api_time(s), "{inner} = {s:?}");
                    seen.insert(inner.clone());
                }
                check_times(&inner, v, seen);
            }
        }
        Value::Array(items) => {
            for item in items {
                check_times(&format!("{path}[]"), item, seen);
            }
        }
        Value::String(s) if looks_like_a_time(s) => {
            assert!(is_api_time(s), "{path} = {s:?}");
            seen.insert(path.to_owned());
        }
        _ => {}
    }
}

async fn body_of(name: &str, response: Response, seen: &mut BTreeSet<String>) -> Value {
    assert!(
        response.status().is_success(),
        "{name}: {}",
        response.status()
    );
    let body: Value = response.json().await.expect("a JSON body");
    check_times(name, &body, seen);
    body
}

#[test]
fn the_checker_refuses_other_shapes() {
    assert!(is_api_time("2026-01-02T03:04:05.000000Z"));
    for other in [
        "2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05.123Z",
        "2026-01-02T03:04:05.123456+00:00",
        "2026-01-02T03:04:05.1234567Z",
        "2026-01-02 03:04:05.123456Z",
    ] {
        assert!(!is_api_time(other), "{other}");
        assert!(looks_like_a_time(other) || other.contains(' '), "{other}");
    }
}

#[tokio::test]
async fn every_time_in_every_response_and_event_has_one_format() {
    let (app, tenant, pool, runner) = signatures::fixture().await.parts();
    let ws = tenant.workspace_id;
    let mut seen = BTreeSet::new();

    // POST personal-access-tokens, then DELETE its access.
    let issued = body_of(
        "issue",
        app.issue(&tenant.token, &issuance_body(&tenant)).await,
        &mut seen,
    )
    .await;
    let token_id = issued["credential"]["id"].as_str().expect("id");
    let revoke = app
        .delete_json(
            &routes::revoke_token(ws, token_id),
            &tenant.token,
            &json!({"reason": "rotated"}),
        )
        .response()
        .await;
    body_of("revoke", revoke, &mut seen).await;

    // POST runner-commands, then the runner's signed status report.
    let (_, delivery) = signatures::submit(&app, &tenant, pool).await;
    let reported = signatures::report(&app, &runner, delivery, json!({"status": "received"})).await;
    body_of("report", reported, &mut seen).await;
    let submitted = app
        .post_json(
            &routes::runner_commands(ws),
            &tenant.token,
            &json!({"poolId": pool, "command": "echo"}),
        )
        .response()
        .await;
    body_of("submit", submitted, &mut seen).await;

    // DELETE runner-pools (forced: commands are open).
    let deleted = app
        .delete_json(
            &routes::runner_pool(ws, pool),
            &tenant.token,
            &json!({"force": true}),
        )
        .response()
        .await;
    body_of("deletePool", deleted, &mut seen).await;

    // POST request-approval.
    let (workflow, revision) = workflows::draft(&app, ws, "deploy").await;
    let approval =
        workflows::request_approval(&app, &tenant.token, ws, workflow, revision, &json!({})).await;
    body_of("requestApproval", approval, &mut seen).await;

    // PUT a review, and another user's report of it.
    let plugin = reviews::create_plugin(&app, &tenant, "formatter").await;
    let review = json!({"rating": 5, "title": "Great", "body": "Saved us hours every week."});
    let put = reviews::put_review(&app, &tenant.token, plugin, &review).await;
    let put = body_of("putReview", put, &mut seen).await;
    let review_id = put["review"]["id"].as_str().expect("id");
    let (_, reporter) = reviews::user_token(&app, &tenant, &[Scope::ReviewsReport]).await;
    let reported = reviews::report(
        &app,
        &reporter,
        plugin,
        review_id,
        &json!({"reason": "spam"}),
    )
    .await;
    body_of("reportReview", reported, &mut seen).await;

    // GET activity: every item, and each item's `data`.
    let activity = app
        .get(
            &format!("{}?limit=100", routes::activity(ws)),
            &tenant.token,
        )
        .response()
        .await;
    let activity = body_of("activity", activity, &mut seen).await;
    let items = activity["items"].as_array().expect("items");
    assert!(activity["nextCursor"].is_null(), "one page holds them all");

    // The stream, replayed from the start: the same events.
    let mut stream = Sse::open(&app, &tenant.token, ws, "?after=0", None).await;
    stream.expect_preamble().await;
    for _ in items {
        let event = stream.next_event().await;
        check_times("event", &event.data, &mut seen);
    }

    for expected in [
        "issue.credential.createdAt",
        "issue.credential.expiresAt",
        "report.delivery.updatedAt",
        "submit.command.createdAt",
        "deletePool.pool.deletedAt",
        "requestApproval.revision.requestedAt",
        "putReview.review.createdAt",
        "putReview.review.updatedAt",
        "reportReview.report.createdAt",
        "activity.items[].occurredAt",
        "activity.items[].data.expiresAt",
        "event.occurredAt",
        "event.data.expiresAt",
    ] {
        assert!(
            seen.contains(expected),
            "{expected} not seen; seen {seen:?}"
        );
    }
}
