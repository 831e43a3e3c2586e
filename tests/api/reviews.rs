//! Marketplace reviews under the default moderation policy, and reports on them.

use chrono::{DateTime, Utc};
use control_plane::domain::{CorrelationId, Scope};
use control_plane::storage::WriteContext;
use reqwest::{Method, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    Call, Tenant, TestApp, assert_api_error, events_about, routes, spawn_app_with, sql_one,
    sql_value, tenant_app,
};

#[tokio::test]
async fn a_plain_review_is_published_and_a_second_put_replaces_it() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "formatter").await;

    let response = put_review(
        &app,
        &tenant.token,
        plugin,
        &json!({"rating": 4, "title": "Solid plugin", "body": "Does what it says."}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-correlation-id"));
    let first: Value = response.json().await.unwrap();
    let review = &first["review"];
    let id = review["id"].as_str().expect("id").to_owned();
    assert_eq!(review["pluginId"], plugin.to_string());
    assert_eq!(review["rating"], 4);
    assert_eq!(review["title"], "Solid plugin");
    assert_eq!(review["body"], "Does what it says.");
    assert_eq!(review["status"], "published");
    assert_eq!(review["moderation"]["decision"], "publish");
    assert_eq!(review["moderation"]["reasons"], json!([]));
    let created = time(&review["createdAt"]);

    let response = put_review(
        &app,
        &tenant.token,
        plugin,
        &json!({"rating": 2, "title": "Changed my mind", "body": "It got slower after the update."}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let second: Value = response.json().await.unwrap();
    let review = &second["review"];
    assert_eq!(review["id"], id.as_str(), "the same review, replaced");
    assert_eq!(review["rating"], 2);
    assert_eq!(review["title"], "Changed my mind");
    assert_eq!(review["body"], "It got slower after the update.");
    assert_eq!(review["status"], "published");
    let recreated = time(&review["createdAt"]);
    assert!(
        (recreated - created).num_milliseconds().abs() <= 1,
        "createdAt is kept: {created} then {recreated}"
    );
    assert!(time(&review["updatedAt"]) > recreated);

    let n = sql_value!(
        app,
        i64,
        "SELECT count(*) FROM plugin_reviews WHERE plugin_id = $1",
        plugin
    );
    assert_eq!(n, 1, "one review per user per plugin");
}

#[tokio::test]
async fn the_default_moderator_holds_or_rejects_on_clear_signals() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "deployer").await;
    for (title, body, status, decision, reason) in [
        (
            "See",
            "more at https://example.com",
            "held",
            "hold",
            "contains a link",
        ),
        (
            "Buy",
            "https://a.example and www.b.example",
            "rejected",
            "reject",
            "contains several links",
        ),
        (
            "THIS IS TERRIBLE",
            "I HATE ALL OF IT",
            "held",
            "hold",
            "mostly capital letters",
        ),
        (
            "Mail me",
            "write to someone@example.com",
            "held",
            "hold",
            "contains contact details",
        ),
        (
            "Fine again",
            "Works as documented.",
            "published",
            "publish",
            "",
        ),
    ] {
        // The same author each time: each PUT replaces the review and is moderated afresh.
        let response = put_review(
            &app,
            &tenant.token,
            plugin,
            &json!({"rating": 3, "title": title, "body": body}),
        )
        .await;
        assert_eq!(response.status(), 200, "{body}");
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["review"]["status"], status, "{body}: {v}");
        assert_eq!(v["review"]["moderation"]["decision"], decision, "{body}");
        let reasons: Vec<&str> = v["review"]["moderation"]["reasons"]
            .as_array()
            .expect("reasons")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if reason.is_empty() {
            assert!(reasons.is_empty(), "{v}");
        } else {
            assert_eq!(reasons, [reason], "{v}");
        }
    }
}

#[tokio::test]
async fn the_configured_blocklist_reaches_the_moderator() {
    let app = spawn_app_with(|c| c.moderation_blocklist = vec!["frobnicate".into()]).await;
    let tenant = app.bootstrap().await;
    let plugin = create_plugin(&app, &tenant, "blocklisted").await;
    let body =
        json!({"rating": 4, "title": "Solid", "body": "It does frobnicate my builds nicely."});
    let response = put_review(&app, &tenant.token, plugin, &body).await;
    assert_eq!(response.status(), 200);
    let review: Value = response.json().await.unwrap();
    assert_eq!(review["review"]["status"], "rejected", "{review}");
    assert_eq!(review["review"]["moderation"]["decision"], "reject");
    // Without the word, the same author's replacement is published.
    let clean = json!({"rating": 4, "title": "Solid", "body": "It speeds up my builds nicely."});
    let review: Value = put_review(&app, &tenant.token, plugin, &clean)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(review["review"]["status"], "published", "{review}");
}

#[tokio::test]
async fn review_bodies_are_validated_and_plugins_must_exist() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "scanner").await;
    for body in [
        json!({"rating": 0, "title": "t", "body": "b"}),
        json!({"rating": 6, "title": "t", "body": "b"}),
        json!({"rating": 4.5, "title": "t", "body": "b"}),
        json!({"rating": 4, "title": "", "body": "b"}),
        json!({"rating": 4, "title": "t".repeat(121), "body": "b"}),
        json!({"rating": 4, "title": "t", "body": "b".repeat(5001)}),
        json!({"rating": 4, "title": "t"}),
        json!({"rating": 4, "title": "t", "body": "b", "stars": 5}),
    ] {
        let response = put_review(&app, &tenant.token, plugin, &body).await;
        let err = assert_api_error(response, 400, "validation_failed").await;
        assert!(err["error"]["details"]["field"].is_string(), "{body}");
    }
    let valid = json!({"rating": 5, "title": "Good", "body": "Useful."});
    for unknown in [Uuid::new_v4().to_string(), "not-a-uuid".to_owned()] {
        app.request(Method::PUT, &routes::own_review(unknown))
            .bearer_auth(&tenant.token)
            .json(&valid)
            .expect(404, "not_found")
            .await;
    }
    let n = sql_value!(app, i64, "SELECT count(*) FROM plugin_reviews");
    assert_eq!(n, 0);
}

#[tokio::test]
async fn one_cannot_report_ones_own_review_nor_report_twice() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "linter").await;
    let review = published_review(&app, &tenant.token, plugin).await;

    let response = report(
        &app,
        &tenant.token,
        plugin,
        &review,
        &json!({"reason": "spam"}),
    )
    .await;
    assert_api_error(response, 403, "forbidden").await;

    let (_, reporter) = user_token(&app, &tenant, &[Scope::ReviewsReport]).await;
    let response = report(
        &app,
        &reporter,
        plugin,
        &review,
        &json!({"reason": "off_topic", "comment": "about another plugin"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-correlation-id"));
    let body: Value = response.json().await.unwrap();
    assert!(
        body["report"]["id"]
            .as_str()
            .is_some_and(|id| id.parse::<Uuid>().is_ok())
    );
    assert_eq!(body["report"]["reviewId"], review.as_str());
    assert_eq!(body["report"]["reason"], "off_topic");
    assert!(body["report"]["createdAt"].is_string());
    assert_eq!(body["review"]["id"], review.as_str());
    assert_eq!(body["review"]["status"], "published");

    for reason in ["off_topic", "abuse"] {
        let response = report(&app, &reporter, plugin, &review, &json!({"reason": reason})).await;
        assert_api_error(response, 409, "already_reported").await;
    }
    let n = sql_value!(app, i64, "SELECT count(*) FROM review_reports");
    assert_eq!(n, 1);
}

#[tokio::test]
async fn reports_are_validated_and_name_a_review_of_that_plugin() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "bundler").await;
    let other_plugin = create_plugin(&app, &tenant, "minifier").await;
    let review = published_review(&app, &tenant.token, plugin).await;
    let (_, reporter) = user_token(&app, &tenant, &[Scope::ReviewsReport]).await;

    for body in [
        json!({}),
        json!({"reason": "boring"}),
        json!({"reason": "spam", "comment": ""}),
        json!({"reason": "spam", "comment": "c".repeat(1001)}),
        json!({"reason": "spam", "severity": 3}),
    ] {
        let response = report(&app, &reporter, plugin, &review, &body).await;
        let err = assert_api_error(response, 400, "validation_failed").await;
        assert!(err["error"]["details"]["field"].is_string(), "{body}");
    }
    let spam = json!({"reason": "spam"});
    for (plugin_id, review_id) in [
        (other_plugin.to_string(), review.clone()),
        (plugin.to_string(), Uuid::new_v4().to_string()),
        (plugin.to_string(), "not-a-uuid".to_owned()),
        (Uuid::new_v4().to_string(), review.clone()),
    ] {
        app.post_json(
            &routes::report_review(plugin_id, review_id),
            &reporter,
            &spam,
        )
        .expect(404, "not_found")
        .await;
    }
    // None of those counted: the first real report is accepted.
    let response = report(&app, &reporter, plugin, &review, &spam).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_review_that_is_not_published_is_no_review_to_other_users() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "unseen").await;
    let other = app.bootstrap().await;
    let (_, foreign) = user_token(&app, &other, &[Scope::ReviewsReport]).await;
    let (_, colleague) = user_token(&app, &tenant, &[Scope::ReviewsReport]).await;
    let spam = json!({"reason": "spam"});

    // Held and rejected on their content: only the author has seen them.
    for (body, status) in [
        ("more at https://example.com", "held"),
        ("https://a.example and www.b.example", "rejected"),
    ] {
        let (_, author) = user_token(&app, &tenant, &[Scope::ReviewsWrite]).await;
        let response = put_review(
            &app,
            &author,
            plugin,
            &json!({"rating": 3, "title": "See", "body": body}),
        )
        .await;
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["review"]["status"], status, "{v}");
        let review = v["review"]["id"].as_str().unwrap().to_owned();
        // Another organisation's user and a colleague alike get what a random id gets.
        for reporter in [&foreign, &colleague] {
            let response = report(&app, reporter, plugin, &review, &spam).await;
            let err = assert_api_error(response, 404, "not_found").await;
            assert_eq!(err["error"]["message"], "no such review of this plugin");
            assert!(err["error"].get("details").is_none(), "{err}");
        }
        // Its author still learns it is theirs.
        let response = report(&app, &author, plugin, &review, &spam).await;
        assert_api_error(response, 403, "forbidden").await;
        assert_eq!(review_status(&app, &review).await, status);
        let id: Uuid = review.parse().unwrap();
        assert_eq!(events_about(&app, "review.reported", id).await.0, 0);
    }

    // Hidden after reports: one who reported it still gets the 409, a newcomer the 404.
    let review = published_review(&app, &tenant.token, plugin).await;
    assert_eq!(
        report(&app, &foreign, plugin, &review, &spam)
            .await
            .status(),
        200
    );
    for _ in 0..2 {
        let (_, reporter) = user_token(&app, &tenant, &[Scope::ReviewsReport]).await;
        let response = report(&app, &reporter, plugin, &review, &spam).await;
        assert_eq!(response.status(), 200);
    }
    assert_eq!(review_status(&app, &review).await, "hidden");
    let response = report(&app, &foreign, plugin, &review, &spam).await;
    assert_api_error(response, 409, "already_reported").await;
    let (_, newcomer) = user_token(&app, &other, &[Scope::ReviewsReport]).await;
    let response = report(&app, &newcomer, plugin, &review, &spam).await;
    assert_api_error(response, 404, "not_found").await;
    assert_eq!(
        report_count(&app, &review).await,
        3,
        "the refused report is not stored"
    );
}

#[tokio::test]
async fn reports_from_three_distinct_users_hide_a_review() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "profiler").await;
    let review = published_review(&app, &tenant.token, plugin).await;

    let mut reporters = Vec::new();
    for _ in 0..3 {
        reporters.push(user_token(&app, &tenant, &[Scope::ReviewsReport]).await.1);
    }
    let expected = ["published", "published", "hidden"];
    for (i, (reporter, status)) in reporters.iter().zip(expected).enumerate() {
        let reason = if i == 1 { "abuse" } else { "spam" };
        let response = report(&app, reporter, plugin, &review, &json!({"reason": reason})).await;
        assert_eq!(response.status(), 200, "report {i}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["review"]["status"], status, "after report {i}: {body}");
    }

    // A repeated report from one of them still does not count twice.
    let response = report(
        &app,
        &reporters[0],
        plugin,
        &review,
        &json!({"reason": "spam"}),
    )
    .await;
    assert_api_error(response, 409, "already_reported").await;
    let (status,) = sql_one!(
        &mut app.db().await,
        (String,),
        "SELECT status FROM plugin_reviews WHERE id = $1",
        review.parse::<Uuid>().unwrap()
    )
    .unwrap();
    assert_eq!(status, "hidden");
}

#[tokio::test]
async fn two_reports_from_one_user_are_not_two_reporters() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "tracer").await;
    let review = published_review(&app, &tenant.token, plugin).await;
    // Two tokens of one user, and a second user: two distinct reporters, not three.
    let (user, first) = user_token(&app, &tenant, &[Scope::ReviewsReport]).await;
    let as_user = Tenant {
        user_id: user,
        ..tenant.clone()
    };
    let second = app
        .admin_token(
            &as_user,
            &[Scope::ReviewsReport],
            &[tenant.workspace_id],
            &[],
        )
        .await;
    let (_, other) = user_token(&app, &tenant, &[Scope::ReviewsReport]).await;

    let spam = json!({"reason": "spam"});
    assert_eq!(
        report(&app, &first, plugin, &review, &spam).await.status(),
        200
    );
    let response = report(&app, &second, plugin, &review, &spam).await;
    assert_api_error(response, 409, "already_reported").await;
    let response = report(&app, &other, plugin, &review, &spam).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["review"]["status"], "published");
}

#[tokio::test]
async fn a_hidden_review_stays_hidden_when_its_author_puts_it_again() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "hidden-put").await;
    let review = hidden_review(&app, &tenant, plugin).await;

    let response = put_review(
        &app,
        &tenant.token,
        plugin,
        &json!({"rating": 5, "title": "Edited", "body": "Nothing to see here, honestly."}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["review"]["id"], review.as_str());
    assert_eq!(body["review"]["status"], "hidden", "{body}");
    assert_eq!(body["review"]["moderation"]["decision"], "hide", "{body}");
    assert_eq!(body["review"]["title"], "Edited", "the content is replaced");
    assert_eq!(review_status(&app, &review).await, "hidden");
    let listed = app.services.list_reviews(plugin).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status.as_str(), "hidden");
}

#[tokio::test]
async fn an_administrator_restores_a_hidden_review_and_its_reports_are_dismissed() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "restored").await;
    let review = hidden_review(&app, &tenant, plugin).await;
    let id: Uuid = review.parse().unwrap();

    // What `cpctl reviews restore --review ID --reason ...` calls.
    let restored = app
        .services
        .restore_review(
            id,
            Some("reports were unfounded"),
            &WriteContext::admin(&CorrelationId::generate()),
        )
        .await
        .expect("restore");
    assert_eq!(restored.status.as_str(), "published");
    assert_eq!(review_status(&app, &review).await, "published");
    assert_eq!(
        report_count(&app, &review).await,
        0,
        "the reports that hid it are dismissed"
    );
    let mut db = app.db().await;
    let (actor, data) = sql_one!(
        &mut db,
        (String, String),
        "SELECT actor_kind, CAST(data AS TEXT) FROM audit_events
         WHERE event_type = 'review.restored' AND target_id = $1",
        id
    )
    .unwrap();
    assert_eq!(actor, "admin");
    let data: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data["reason"], "reports were unfounded");
    assert_eq!(data["dismissedReports"], 3);
    assert_eq!(data["status"], "published");

    // Only a hidden review is restored.
    let again = app
        .services
        .restore_review(id, None, &WriteContext::admin(&CorrelationId::generate()))
        .await;
    assert!(again.is_err(), "{again:?}");
    assert!(
        app.services
            .restore_review(
                Uuid::new_v4(),
                None,
                &WriteContext::admin(&CorrelationId::generate())
            )
            .await
            .is_err()
    );
}

#[tokio::test]
async fn concurrent_reports_cannot_all_miss_the_threshold() {
    let (app, tenant) = tenant_app().await;
    let plugin = create_plugin(&app, &tenant, "contended").await;
    let review = published_review(&app, &tenant.token, plugin).await;
    let mut reporters = Vec::new();
    for _ in 0..5 {
        reporters.push(user_token(&app, &tenant, &[Scope::ReviewsReport]).await.1);
    }
    let spam = json!({"reason": "spam"});
    let responses = futures_util::future::join_all(
        reporters
            .iter()
            .map(|token| report(&app, token, plugin, &review, &spam)),
    )
    .await;
    let mut answers = Vec::new();
    for response in responses {
        let answer = match response.status().as_u16() {
            200 => {
                let body: Value = response.json().await.unwrap();
                body["review"]["status"].as_str().unwrap().to_owned()
            }
            status => status.to_string(),
        };
        answers.push(answer);
    }
    // The reports were decided one after another: two saw fewer than three reporters, the
    // third hid the review, and the last two found it no longer shown.
    answers.sort();
    assert_eq!(answers, ["404", "404", "hidden", "published", "published"]);
    assert_eq!(review_status(&app, &review).await, "hidden");
}

/// A review by `tenant`'s user that three other users reported, hidden; returns its id.
pub(crate) async fn hidden_review(app: &TestApp, tenant: &Tenant, plugin: Uuid) -> String {
    let review = published_review(app, &tenant.token, plugin).await;
    for _ in 0..3 {
        let (_, reporter) = user_token(app, tenant, &[Scope::ReviewsReport]).await;
        let response = report(app, &reporter, plugin, &review, &json!({"reason": "spam"})).await;
        assert_eq!(response.status(), 200);
    }
    assert_eq!(review_status(app, &review).await, "hidden");
    review
}

async fn review_status(app: &TestApp, review: &str) -> String {
    let (status,) = sql_one!(
        &mut app.db().await,
        (String,),
        "SELECT status FROM plugin_reviews WHERE id = $1",
        review.parse::<Uuid>().unwrap()
    )
    .unwrap();
    status
}

async fn report_count(app: &TestApp, review: &str) -> i64 {
    let (reports,) = sql_one!(
        &mut app.db().await,
        (i64,),
        "SELECT count(*) FROM review_reports WHERE review_id = $1",
        review.parse::<Uuid>().unwrap()
    )
    .unwrap();
    reports
}

pub(crate) async fn create_plugin(app: &TestApp, tenant: &Tenant, name: &str) -> Uuid {
    app.services
        .create_plugin(
            tenant.organisation_id,
            name,
            &WriteContext::admin(&CorrelationId::generate()),
        )
        .await
        .expect("plugin")
        .id
}

/// A new user of the tenant's organisation and a token of theirs: (user id, token).
pub(crate) async fn user_token(app: &TestApp, tenant: &Tenant, scopes: &[Scope]) -> (Uuid, String) {
    let user = app
        .services
        .create_user(
            tenant.organisation_id,
            &format!("user-{}@example.com", Uuid::new_v4().simple()),
            &CorrelationId::generate(),
        )
        .await
        .expect("user");
    let as_user = Tenant {
        user_id: user.id,
        ..tenant.clone()
    };
    let token = app
        .admin_token(&as_user, scopes, &[tenant.workspace_id], &[])
        .await;
    (user.id, token)
}

pub(crate) async fn put_review(app: &TestApp, token: &str, plugin: Uuid, body: &Value) -> Response {
    app.request(Method::PUT, &routes::own_review(plugin))
        .bearer_auth(token)
        .json(body)
        .response()
        .await
}

/// Puts a review that the default moderator publishes; returns its id.
pub(crate) async fn published_review(app: &TestApp, token: &str, plugin: Uuid) -> String {
    let response = put_review(
        app,
        token,
        plugin,
        &json!({"rating": 5, "title": "Great", "body": "Saved us hours every week."}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["review"]["status"], "published", "{body}");
    body["review"]["id"].as_str().expect("id").to_owned()
}

pub(crate) async fn report(
    app: &TestApp,
    token: &str,
    plugin: Uuid,
    review: &str,
    body: &Value,
) -> Response {
    app.post_json(&routes::report_review(plugin, review), token, body)
        .response()
        .await
}

fn time(value: &Value) -> DateTime<Utc> {
    serde_json::from_value(value.clone()).expect("an RFC 3339 time")
}
