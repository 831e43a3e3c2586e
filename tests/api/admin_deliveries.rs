//! An organisation's deliveries over the admin API: who may list, show, resend and recover them
//! (the role table), that another organisation's pool or delivery is a 404 that changes
//! nothing, and that a resend or a recovery is audited as `webhook_delivery.resent` in the
//! delivery's workspace naming the user and token that acted, once per keyed request, with
//! only the event types its operation declares.

use control_plane::config::ServerConfig;
use control_plane::domain::{Operation, RetrySchedule, Role, Scope};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::loopback::{Answer, Loopback, set_url, until};
use crate::support::runner::{fixture_with, submit};
use crate::support::{Call, Tenant, TestApp, event_actor, events_about, routes, sql_all, sql_one};

const ADMIN: &[Scope] = &[Scope::AdminRead, Scope::AdminWrite];

/// One attempt, then failed; due deliveries looked for often.
fn one_attempt(c: &mut ServerConfig) {
    c.delivery_retry_schedule = RetrySchedule::parse("0s").unwrap();
    c.delivery_breaker_after = 0;
    c.delivery_poll_ms = 20;
}

/// A delivery whose one attempt failed (the runner answers 500).
async fn failed_delivery(app: &TestApp, tenant: &Tenant, pool: Uuid) -> Uuid {
    let (_, delivery) = submit(app, tenant, pool).await;
    until("the delivery fails", async || {
        app.services
            .delivery_report(delivery)
            .await
            .unwrap()
            .status
            .as_str()
            == "failed"
    })
    .await;
    delivery
}

/// The workspace an event of `event_type` about `target` was written in.
async fn event_workspace(app: &TestApp, event_type: &str, target: Uuid) -> Option<Uuid> {
    let (workspace,) = sql_one!(
        &mut app.db().await,
        (Option<Uuid>,),
        "SELECT workspace_id FROM audit_events WHERE event_type = $1 AND target_id = $2",
        event_type,
        target
    )
    .unwrap();
    workspace
}

/// The event types one request wrote (by its correlation id), each of which its operation must
/// declare (`x-audit-events`); returned sorted, for the caller to check what was written.
async fn written_and_declared(
    app: &TestApp,
    correlation: &str,
    operation: Operation,
) -> Vec<String> {
    let rows = sql_all!(
        &mut app.db().await,
        (String,),
        "SELECT DISTINCT event_type FROM audit_events WHERE correlation_id = $1 ORDER BY event_type",
        correlation
    )
    .unwrap();
    let written: Vec<String> = rows.into_iter().map(|(t,)| t).collect();
    for event_type in &written {
        assert!(
            operation.spec().audit.contains(&event_type.as_str()),
            "{} writes {event_type}, which it does not declare",
            operation.id()
        );
    }
    written
}

#[tokio::test]
async fn an_admin_resends_a_failed_delivery_once_and_the_event_names_it() {
    let (app, tenant, pool, runner) = fixture_with(one_attempt).await.parts();
    let org = tenant.organisation_id;
    let sink = Loopback::scripted(&[], Answer::Status(500)).await;
    set_url(&app, runner.runner_id, &sink.url).await;
    let delivery = failed_delivery(&app, &tenant, pool).await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;

    // Listed and shown, with its attempt.
    let page: Value = app
        .get_ok(&routes::deliveries(org, pool), &admin.token)
        .await;
    assert_eq!(page["items"][0]["id"], json!(delivery));
    assert_eq!(page["items"][0]["status"], "failed");
    let failed: Value = app
        .get_ok(
            &format!("{}?status=failed", routes::deliveries(org, pool)),
            &admin.token,
        )
        .await;
    assert_eq!(failed["items"].as_array().unwrap().len(), 1);
    let shown: Value = app
        .get_ok(&routes::delivery(org, delivery), &admin.token)
        .await;
    assert_eq!(shown["delivery"]["id"], json!(delivery));
    assert_eq!(shown["delivery"]["attempts"][0]["statusCode"], 500);

    // A keyed resend runs once; its replay answers the same and writes nothing more.
    let key = format!("k-{}", Uuid::new_v4().simple());
    let correlation = format!("resend-{}", Uuid::new_v4().simple());
    let send = || {
        app.post_json(
            &routes::resend_delivery(org, delivery),
            &admin.token,
            &json!({}),
        )
        .header("idempotency-key", key.clone())
        .header("x-correlation-id", correlation.clone())
    };
    let first: Value = send().ok().await;
    let replay: Value = send().ok().await;
    assert_eq!(first, replay);
    assert!(first["resent"]["newCommandId"].is_string(), "{first}");
    assert_eq!(first["resent"]["webhookId"], json!(delivery));
    assert_eq!(
        events_about(&app, "webhook_delivery.resent", delivery)
            .await
            .0,
        1
    );
    assert_eq!(
        event_actor(&app, "webhook_delivery.resent", delivery).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id))
    );
    assert_eq!(
        event_workspace(&app, "webhook_delivery.resent", delivery).await,
        Some(tenant.workspace_id)
    );
    // The failed delivery went again as a new command: its submission is written too, and
    // both are declared on the operation.
    assert_eq!(
        written_and_declared(&app, &correlation, Operation::ResendDelivery).await,
        ["runner_command.submitted", "webhook_delivery.resent"]
    );

    // Resent once: another resend is the state's conflict.
    app.post_json(
        &routes::resend_delivery(org, delivery),
        &admin.token,
        &json!({}),
    )
    .expect(409, "invalid_state")
    .await;
}

#[tokio::test]
async fn another_organisation_s_deliveries_are_not_found_and_nothing_is_resent() {
    let (app, tenant, pool, runner) = fixture_with(one_attempt).await.parts();
    let org = tenant.organisation_id;
    let sink = Loopback::scripted(&[], Answer::Status(500)).await;
    set_url(&app, runner.runner_id, &sink.url).await;
    let since = chrono::Utc::now() - chrono::Duration::minutes(1);
    let delivery = failed_delivery(&app, &tenant, pool).await;
    let other = app.bootstrap().await;
    let foreign = app.user_in_role(&other, Role::Admin, ADMIN).await;

    // Through this organisation's routes, and through its own with this one's ids.
    for o in [org, other.organisation_id] {
        app.post_json(
            &routes::resend_delivery(o, delivery),
            &foreign.token,
            &json!({}),
        )
        .expect(404, "not_found")
        .await;
        app.post_json(
            &routes::recover_deliveries(o, pool),
            &foreign.token,
            &json!({ "since": since.to_rfc3339() }),
        )
        .expect(404, "not_found")
        .await;
        app.get(&routes::delivery(o, delivery), &foreign.token)
            .expect(404, "not_found")
            .await;
        app.get(&routes::deliveries(o, pool), &foreign.token)
            .expect(404, "not_found")
            .await;
    }
    // Even another organisation's operator names this one's delivery under its own.
    app.post_json(
        &routes::resend_delivery(other.organisation_id, delivery),
        &other.token,
        &json!({}),
    )
    .expect(404, "not_found")
    .await;
    assert_eq!(
        events_about(&app, "webhook_delivery.resent", delivery)
            .await
            .0,
        0
    );

    // The organisation's own admin recovers it: one event per delivery resent, naming it.
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let correlation = format!("recover-{}", Uuid::new_v4().simple());
    let recovered: Value = app
        .post_json(
            &routes::recover_deliveries(org, pool),
            &admin.token,
            &json!({ "since": since.to_rfc3339() }),
        )
        .header("x-correlation-id", correlation.clone())
        .ok()
        .await;
    assert_eq!(recovered["resent"], 1, "{recovered}");
    assert_eq!(
        written_and_declared(&app, &correlation, Operation::RecoverDeliveries).await,
        ["runner_command.submitted", "webhook_delivery.resent"]
    );
    assert_eq!(recovered["deliveries"][0]["deliveryId"], json!(delivery));
    assert_eq!(
        event_actor(&app, "webhook_delivery.resent", delivery).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id))
    );
    // Each once: a second recovery does not resend it again. (The command it became goes to
    // the same failing runner, so its own delivery may have failed by now and be resent.)
    let again: Value = app
        .post_ok(
            &routes::recover_deliveries(org, pool),
            &admin.token,
            &json!({ "since": since.to_rfc3339() }),
        )
        .await;
    let resent_again = again["deliveries"].as_array().unwrap();
    assert!(
        resent_again
            .iter()
            .all(|d| d["deliveryId"] != json!(delivery)),
        "{again}"
    );
    assert_eq!(again["resent"], json!(resent_again.len()), "{again}");
    app.post_json(
        &routes::recover_deliveries(org, pool),
        &admin.token,
        &json!({ "since": "yesterday" }),
    )
    .expect(400, "validation_failed")
    .await;
}

#[tokio::test]
async fn the_role_table_decides_every_delivery_operation() {
    let (app, tenant, pool, _) = fixture_with(one_attempt).await.parts();
    let org = tenant.organisation_id;
    let (_, delivery) = submit(&app, &tenant, pool).await;
    let other = app.bootstrap().await;
    let foreign_admin = app.user_in_role(&other, Role::Admin, ADMIN).await;
    let reader = app
        .user_in_role(&tenant, Role::Admin, &[Scope::AdminRead])
        .await;
    let member = app
        .user_in_role(&tenant, Role::Member, &[Scope::ActivityRead])
        .await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let since = json!({ "since": "2020-01-01T00:00:00Z" });
    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, routes::deliveries(org, pool), None),
        (Method::GET, routes::delivery(org, delivery), None),
        (
            Method::POST,
            routes::resend_delivery(org, delivery),
            Some(json!({})),
        ),
        (
            Method::POST,
            routes::recover_deliveries(org, pool),
            Some(since),
        ),
    ];
    let status_of = async |token: &str, (method, path, body): &(Method, String, Option<Value>)| {
        let mut request = app.request(method.clone(), path).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        request.status_code().await
    };
    // A pending delivery is resent now, or (an attempt in flight) refused with 409: either
    // way the caller was let through.
    let allowed = |status: u16| status == 200 || status == 409;
    for route in &routes {
        let label = format!("{} {}", route.0, route.1);
        assert_eq!(
            status_of(&member.token, route).await,
            403,
            "member: {label}"
        );
        assert_eq!(
            status_of(&foreign_admin.token, route).await,
            404,
            "another organisation's admin: {label}"
        );
        let read = route.0 == Method::GET;
        let by_reader = status_of(&reader.token, route).await;
        if read {
            assert_eq!(by_reader, 200, "admin:read only: {label}");
        } else {
            assert_eq!(by_reader, 403, "admin:read only: {label}");
        }
        let by_admin = status_of(&admin.token, route).await;
        assert!(allowed(by_admin), "admin: {label}: {by_admin}");
        let by_operator = status_of(&other.token, route).await;
        assert!(allowed(by_operator), "operator: {label}: {by_operator}");
    }
    app.get(&routes::deliveries(org, Uuid::new_v4()), &admin.token)
        .expect(404, "not_found")
        .await;
    app.get(&routes::delivery(org, Uuid::new_v4()), &admin.token)
        .expect(404, "not_found")
        .await;
}

#[tokio::test]
async fn a_pool_s_deliveries_are_paged_newest_first_by_cursor() {
    let (app, tenant, pool, _) = fixture_with(one_attempt).await.parts();
    let org = tenant.organisation_id;
    let mut made = Vec::new();
    for _ in 0..3 {
        made.push(submit(&app, &tenant, pool).await.1);
    }
    let mut seen: Vec<Uuid> = vec![];
    let mut created: Vec<String> = vec![];
    let mut path = format!("{}?limit=2", routes::deliveries(org, pool));
    loop {
        let page: Value = app.get_ok(&path, &tenant.token).await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        for d in items {
            seen.push(serde_json::from_value(d["id"].clone()).unwrap());
            created.push(d["createdAt"].as_str().unwrap().to_owned());
        }
        match page["nextCursor"].as_str() {
            Some(cursor) => {
                path = format!("{}?limit=2&cursor={cursor}", routes::deliveries(org, pool))
            }
            None => break,
        }
    }
    // Each once, newest first (deliveries made in the same instant in either order).
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "{created:?}");
    seen.sort();
    made.sort();
    assert_eq!(seen, made);
}
