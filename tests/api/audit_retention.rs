//! Audit retention seen over HTTP: once retention removed a workspace's oldest
//! events, an activity cursor or a stream's `Last-Event-ID` that points into them gets 410
//! `cursor_expired` (with the oldest sequence kept) instead of a silent gap, while a current
//! cursor still works. And `cpctl audit export`'s pages, written as each event's JSON, are the
//! activity pages' items byte for byte.

use std::time::Duration;

use chrono::Utc;
use control_plane::domain::{CorrelationId, EventJson, Span};
use control_plane::storage::{TimeWindow, WriteContext};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::support::sse::{Sse, stream_path};
use crate::support::{Call, Tenant, TestApp, issuance_body, routes, tenant_app};

async fn issue(app: &TestApp, tenant: &Tenant, times: usize) {
    for _ in 0..times {
        let status = app
            .issue(&tenant.token, &issuance_body(tenant))
            .await
            .status();
        assert_eq!(status, 200);
    }
}

/// 8 events, then (a moment later) 2 more; retention removes the first 8.
async fn retained_log() -> (TestApp, Tenant) {
    let (app, tenant) = tenant_app().await;
    issue(&app, &tenant, 6).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let between = Utc::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    issue(&app, &tenant, 2).await;
    let cid = CorrelationId::generate();
    app.services
        .set_audit_retention(
            tenant.organisation_id,
            Some("1h".parse::<Span>().unwrap()),
            &WriteContext::admin(&cid),
        )
        .await
        .unwrap();
    // As if an hour had passed since `between`: the 8 older events are past retention.
    let removed = app
        .services
        .purge_expired_audit(between + chrono::Duration::hours(1))
        .await
        .unwrap();
    assert_eq!(removed, 8);
    (app, tenant)
}

#[tokio::test]
async fn an_activity_cursor_into_removed_events_is_gone_and_a_current_one_works() {
    let (app, tenant) = retained_log().await;
    let base = routes::activity(tenant.workspace_id);
    for cursor in ["3", "9"] {
        let err = app
            .get(&format!("{base}?cursor={cursor}"), &tenant.token)
            .expect(410, "cursor_expired")
            .await;
        assert_eq!(err["error"]["details"]["oldestSequence"], 9, "{cursor}");
    }
    let first = app.activity(&tenant, "?limit=1").await;
    assert_eq!(first["items"][0]["sequence"], 10);
    let next = first["nextCursor"].as_str().expect("a second page");
    let second = app
        .activity(&tenant, &format!("?limit=1&cursor={next}"))
        .await;
    assert_eq!(second["items"][0]["sequence"], 9);
    assert!(second["nextCursor"].is_null());
    // The cursor just past the oldest kept event is the end of the log, not an error.
    let end = app.activity(&tenant, "?cursor=10").await;
    assert_eq!(end["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_last_event_id_into_removed_events_is_gone_and_a_current_one_resumes() {
    let (app, tenant) = retained_log().await;
    let ws = tenant.workspace_id;
    for (header, query) in [(Some("4"), ""), (Some("7"), ""), (None, "?after=2")] {
        let mut request = app
            .client
            .get(format!("{}{}{query}", app.address, stream_path(ws)))
            .bearer_auth(&tenant.token);
        if let Some(id) = header {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 410, "{header:?} {query}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "cursor_expired");
        assert_eq!(body["error"]["details"]["oldestSequence"], 9);
    }
    // Resuming from the last removed event loses nothing: it goes on at the oldest kept.
    let mut stream = Sse::open(&app, &tenant.token, ws, "", Some(8)).await;
    stream.expect_preamble().await;
    assert_eq!(stream.next_event().await.id, 9);
    assert_eq!(stream.next_event().await.id, 10);
    // `after=0`, the whole log, is what is kept.
    let mut stream = Sse::open(&app, &tenant.token, ws, "?after=0", None).await;
    stream.expect_preamble().await;
    assert_eq!(stream.next_event().await.id, 9);
}

#[derive(Deserialize)]
struct RawPage<'a> {
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
    #[serde(rename = "nextCursor")]
    next_cursor: Option<String>,
}

#[tokio::test]
async fn export_lines_are_the_activity_items_byte_for_byte() {
    let (app, tenant) = tenant_app().await;
    issue(&app, &tenant, 5).await;
    // Every page over HTTP, oldest first.
    let mut items: Vec<String> = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = format!(
            "{}?limit=2&cursor={cursor}",
            routes::activity(tenant.workspace_id)
        );
        let body = app.get(&path, &tenant.token).send().await.unwrap();
        assert_eq!(body.status(), 200);
        let text = body.text().await.unwrap();
        let page: RawPage = serde_json::from_str(&text).unwrap();
        items.extend(page.items.iter().map(|i| i.get().to_owned()));
        match page.next_cursor {
            Some(next) => cursor = next,
            None => break,
        }
    }
    items.reverse();
    // The export, as `cpctl audit export` writes it (its pages, each event as `EventJson`).
    let mut lines = Vec::new();
    let mut after = 0;
    loop {
        let page = app
            .services
            .export_audit_page(tenant.workspace_id, after, TimeWindow::default())
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = last.sequence.unwrap();
        lines.extend(
            page.iter()
                .map(|e| serde_json::to_string(&EventJson::from(e)).unwrap()),
        );
    }
    assert_eq!(lines.len(), 7);
    assert_eq!(lines, items);
}
