//! GET /v1/workspaces/{workspaceId}/audit/stream: Server-Sent Events, replayed from the durable
//! log after a sequence, then live, with no gap and no duplicate across reconnections.

use std::time::Duration;

use control_plane::domain::{CorrelationId, Scope};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{TestApp, assert_api_error, issuance_body, spawn_app, sql_all};

/// Longest wait for anything on a stream, so a failing test cannot hang.
const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn after_zero_replays_the_log_in_order_then_follows_live() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "stream").await;
    submit(&app, &tenant.token, ws, pool).await;
    let logged = logged_events(&app, ws).await;
    assert!(logged.len() >= 4, "{logged:?}");
    let sequences: Vec<i64> = logged.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(sequences, (1..=logged.len() as i64).collect::<Vec<_>>());

    let mut stream = Sse::open(&app, &tenant.token, ws, "?after=0", None).await;
    stream.expect_preamble().await;
    for (seq, kind) in &logged {
        let event = stream.next_event().await;
        assert_eq!(event.id, *seq);
        assert_eq!(&event.event, kind);
        assert_eq!(event.data["sequence"], *seq);
        assert_eq!(event.data["type"], kind.as_str());
        assert!(event.data["correlationId"].is_string(), "{}", event.data);
    }

    // An event written after subscribing arrives next, with the next sequence.
    let command = submit(&app, &tenant.token, ws, pool).await;
    let event = stream.next_event().await;
    assert_eq!(event.id, logged.len() as i64 + 1);
    assert_eq!(event.event, "runner_command.submitted");
    assert_eq!(event.data["target"]["id"], command.to_string());
    assert_eq!(event.data["actor"]["id"], tenant.user_id.to_string());
    assert_eq!(event.data["data"]["poolId"], pool.to_string());
}

#[tokio::test]
async fn without_a_cursor_only_new_events_arrive() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "fresh").await;
    let mut stream = Sse::open(&app, &tenant.token, ws, "", None).await;
    stream.expect_preamble().await;
    let head = logged_events(&app, ws).await.len() as i64;
    assert!(head >= 3);

    let command = submit(&app, &tenant.token, ws, pool).await;
    let event = stream.next_event().await;
    assert_eq!(event.id, head + 1, "no replay of the older events");
    assert_eq!(event.event, "runner_command.submitted");
    assert_eq!(event.data["target"]["id"], command.to_string());
}

#[tokio::test]
async fn reconnecting_with_last_event_id_misses_nothing_and_repeats_nothing() {
    const WRITES: usize = 40;
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "resume").await;

    // Commands keep being submitted while the client reads, disconnects and reconnects.
    let writer = {
        let client = app.client.clone();
        let url = app.url(&format!("/v1/workspaces/{ws}/runner-commands"));
        let token = tenant.token.clone();
        tokio::spawn(async move {
            for i in 0..WRITES {
                let response = client
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&json!({"poolId": pool, "command": format!("step-{i}")}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200);
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
        })
    };

    let mut seen: Vec<i64> = Vec::new();
    let mut last: Option<i64> = None;
    for _ in 0..4 {
        // `?after=0` on every connection: Last-Event-ID, when sent, wins over it.
        let mut stream = Sse::open(&app, &tenant.token, ws, "?after=0", last).await;
        stream.expect_preamble().await;
        for _ in 0..6 {
            let event = stream.next_event().await;
            seen.push(event.id);
            last = Some(event.id);
        }
        drop(stream);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::timeout(WAIT * 3, writer)
        .await
        .expect("the writer finishes")
        .expect("every submission succeeded");

    let total = logged_events(&app, ws).await.len() as i64;
    assert!(total >= WRITES as i64 + 3, "{total}");
    let mut stream = Sse::open(&app, &tenant.token, ws, "?after=0", last).await;
    stream.expect_preamble().await;
    while seen.last().is_some_and(|id| *id < total) {
        seen.push(stream.next_event().await.id);
    }
    assert_eq!(
        seen,
        (1..=total).collect::<Vec<_>>(),
        "every sequence exactly once, in order"
    );
}

#[tokio::test]
async fn types_filter_the_replay_and_the_live_events() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let busy = create_pool(&app, ws, "busy").await;
    let idle = create_pool(&app, ws, "idle").await;
    submit(&app, &tenant.token, ws, busy).await;
    let response = app
        .delete_json(
            &format!("/v1/workspaces/{ws}/runner-pools/{idle}"),
            &tenant.token,
            &json!({"reason": "unused"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let types = ["runner_command.submitted", "runner_pool.deleted"];
    let wanted: Vec<(i64, String)> = logged_events(&app, ws)
        .await
        .into_iter()
        .filter(|(_, kind)| types.contains(&kind.as_str()))
        .collect();
    assert_eq!(wanted.len(), 2, "{wanted:?}");

    let query = format!("?after=0&types={}", types.join(","));
    let mut stream = Sse::open(&app, &tenant.token, ws, &query, None).await;
    stream.expect_preamble().await;
    for (seq, kind) in &wanted {
        let event = stream.next_event().await;
        assert_eq!((event.id, &event.event), (*seq, kind));
    }

    // Live: an event of another type is skipped, the next wanted one arrives.
    assert_eq!(
        app.issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status(),
        200
    );
    let command = submit(&app, &tenant.token, ws, busy).await;
    let event = stream.next_event().await;
    assert_eq!(event.event, "runner_command.submitted");
    assert_eq!(event.data["target"]["id"], command.to_string());
    let logged = logged_events(&app, ws).await;
    let n = logged.len();
    assert_eq!(logged[n - 2].1, "token.issued");
    assert_eq!(event.id, logged[n - 1].0);
}

#[tokio::test]
async fn the_stream_needs_audit_read_on_that_workspace() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let lacking = app
        .admin_token(
            &tenant,
            &[Scope::ActivityRead, Scope::RunnerCommandsSubmit],
            &[ws],
            &[],
        )
        .await;
    let response = app.get(&stream_path(ws), &lacking).send().await.unwrap();
    assert_api_error(response, 403, "forbidden").await;

    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let other = app.bootstrap().await;
    for workspace in [
        second.to_string(),
        other.workspace_id.to_string(),
        "not-a-uuid".to_owned(),
    ] {
        let response = app
            .get(&stream_path(&workspace), &tenant.token)
            .send()
            .await
            .unwrap();
        assert_api_error(response, 403, "forbidden").await;
    }

    let response = app
        .request(reqwest::Method::GET, &stream_path(ws))
        .send()
        .await
        .unwrap();
    assert_api_error(response, 401, "unauthenticated").await;

    // Only audit:read is needed.
    let reader = app
        .admin_token(&tenant, &[Scope::AuditRead], &[ws], &[])
        .await;
    let mut stream = Sse::open(&app, &reader, ws, "?after=0", None).await;
    stream.expect_preamble().await;
    assert_eq!(stream.next_event().await.id, 1);
}

#[tokio::test]
async fn malformed_cursors_are_400() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    for (query, last_event_id, field) in [
        ("?after=-1", None, "after"),
        ("?after=abc", None, "after"),
        ("", Some("abc"), "Last-Event-ID"),
        ("?after=0", Some("-3"), "Last-Event-ID"),
    ] {
        let mut request = app.get(&format!("{}{query}", stream_path(ws)), &tenant.token);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap();
        let err = assert_api_error(response, 400, "validation_failed").await;
        assert_eq!(
            err["error"]["details"]["field"], field,
            "{query} {last_event_id:?}"
        );
    }
}

/// One event of the stream.
struct Event {
    id: i64,
    event: String,
    data: Value,
}

/// A client of the audit stream that reads whole blocks (one event or comment each).
struct Sse {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Sse {
    async fn open(
        app: &TestApp,
        token: &str,
        workspace: Uuid,
        query: &str,
        last_event_id: Option<i64>,
    ) -> Self {
        let mut request = app.get(&format!("{}{query}", stream_path(workspace)), token);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = tokio::time::timeout(WAIT, request.send())
            .await
            .expect("the stream answers within 10 s")
            .expect("request");
        assert_eq!(response.status(), 200);
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        assert_eq!(response.headers()["cache-control"], "no-cache");
        Self {
            response,
            buffer: Vec::new(),
        }
    }

    /// The next block, up to a blank line.
    async fn block(&mut self) -> String {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                return String::from_utf8(block[..end].to_vec()).expect("UTF-8");
            }
            let chunk = tokio::time::timeout(WAIT, self.response.chunk())
                .await
                .expect("nothing arrived on the stream within 10 s")
                .expect("read the stream")
                .expect("the stream ended");
            self.buffer.extend_from_slice(&chunk);
        }
    }

    /// The first block: the reconnection delay and a comment saying the subscription is live.
    async fn expect_preamble(&mut self) {
        assert_eq!(self.block().await, "retry: 2000\n: subscribed");
    }

    /// The next event, skipping comments (heartbeats).
    async fn next_event(&mut self) -> Event {
        loop {
            let block = self.block().await;
            let (mut id, mut event, mut data) = (None, None, None);
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.parse::<i64>().expect("a numeric id"));
                } else if let Some(v) = line.strip_prefix("event: ") {
                    event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str::<Value>(v).expect("JSON data"));
                } else {
                    assert!(line.starts_with(':'), "unexpected line {line:?}");
                }
            }
            match (id, event, data) {
                (Some(id), Some(event), Some(data)) => return Event { id, event, data },
                (None, None, None) => continue,
                partial => panic!("an incomplete event {partial:?} in {block:?}"),
            }
        }
    }
}

fn stream_path(workspace: impl std::fmt::Display) -> String {
    format!("/v1/workspaces/{workspace}/audit/stream")
}

async fn create_pool(app: &TestApp, workspace: Uuid, name: &str) -> Uuid {
    app.services
        .create_pool(workspace, name, &CorrelationId::generate())
        .await
        .expect("pool")
        .id
}

/// Submits a command over HTTP; returns its id.
async fn submit(app: &TestApp, token: &str, workspace: Uuid, pool: Uuid) -> Uuid {
    let response = app
        .post_json(
            &format!("/v1/workspaces/{workspace}/runner-commands"),
            token,
            &json!({"poolId": pool, "command": "echo"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["command"]["id"].as_str().unwrap().parse().unwrap()
}

/// The workspace's durable log: (sequence, type), oldest first.
async fn logged_events(app: &TestApp, workspace: Uuid) -> Vec<(i64, String)> {
    sql_all!(
        &mut app.db().await,
        (i64, String),
        "SELECT seq, event_type FROM audit_events WHERE workspace_id = $1 ORDER BY seq",
        workspace
    )
    .unwrap()
}
