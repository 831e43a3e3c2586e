//! GET /v1/workspaces/{workspaceId}/audit/stream: Server-Sent Events, replayed from the durable
//! log after a sequence, then live, with no gap and no duplicate across reconnections.

use std::time::Duration;

use control_plane::domain::{CorrelationId, Scope};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    ServerProcess, Tenant, TestApp, assert_api_error, create_pool, issuance_body, needs, spawn_app,
    spawn_app_with, sql_all, sql_exec,
};

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
    // An empty `after=` is documented as absent.
    for query in ["", "?after="] {
        let mut stream = Sse::open(&app, &tenant.token, ws, query, None).await;
        stream.expect_preamble().await;
        let head = logged_events(&app, ws).await.len() as i64;
        assert!(head >= 3);

        let command = submit(&app, &tenant.token, ws, pool).await;
        let event = stream.next_event().await;
        assert_eq!(
            event.id,
            head + 1,
            "no replay of the older events: {query:?}"
        );
        assert_eq!(event.event, "runner_command.submitted");
        assert_eq!(event.data["target"]["id"], command.to_string());
    }
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
pub(crate) struct Event {
    pub(crate) id: i64,
    pub(crate) event: String,
    pub(crate) data: Value,
}

/// A client of the audit stream that reads whole blocks (one event or comment each).
pub(crate) struct Sse {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Sse {
    pub(crate) async fn open(
        app: &TestApp,
        token: &str,
        workspace: Uuid,
        query: &str,
        last_event_id: Option<i64>,
    ) -> Self {
        Self::open_at(
            &app.client,
            &app.address,
            token,
            workspace,
            query,
            last_event_id,
        )
        .await
    }

    /// The stream of the server at `base` (another replica).
    async fn open_at(
        client: &reqwest::Client,
        base: &str,
        token: &str,
        workspace: Uuid,
        query: &str,
        last_event_id: Option<i64>,
    ) -> Self {
        let mut request = client
            .get(format!("{base}{}{query}", stream_path(workspace)))
            .bearer_auth(token);
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
    pub(crate) async fn expect_preamble(&mut self) {
        assert_eq!(self.block().await, "retry: 2000\n: subscribed");
    }

    /// The next event, skipping comments (heartbeats).
    pub(crate) async fn next_event(&mut self) -> Event {
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

/// What a stream sent after a point, up to its end.
#[derive(Debug)]
struct Ending {
    /// Ids of the events received before the end.
    events: Vec<i64>,
    /// The last comment (without `: `), the reason the server gave.
    comment: String,
    /// From the start of the wait to the end of the response.
    took: Duration,
}

impl Sse {
    /// Reads every block until the response ends (failing after 10 s).
    async fn until_end(&mut self) -> Ending {
        let started = std::time::Instant::now();
        let mut events = Vec::new();
        let mut comment = String::new();
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let block = String::from_utf8(block[..end].to_vec()).expect("UTF-8");
                for line in block.lines() {
                    if let Some(id) = line.strip_prefix("id: ") {
                        events.push(id.parse().expect("a numeric id"));
                    } else if let Some(text) = line.strip_prefix(": ") {
                        comment = text.to_owned();
                    }
                }
                continue;
            }
            let chunk = tokio::time::timeout(WAIT, self.response.chunk())
                .await
                .expect("the stream did not end within 10 s")
                .expect("read the stream");
            match chunk {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => {
                    assert!(self.buffer.is_empty(), "a partial block {:?}", self.buffer);
                    return Ending {
                        events,
                        comment,
                        took: started.elapsed(),
                    };
                }
            }
        }
    }
}

impl Ending {
    /// Ended within 2 s, saying `reason`, with no event after the point the wait started.
    fn assert_prompt(&self, reason: &str) {
        assert_eq!(self.comment, reason, "{self:?}");
        assert!(self.events.is_empty(), "sent after access ended: {self:?}");
        assert!(self.took < Duration::from_secs(2), "{self:?}");
    }
}

/// Issues a token with `audit:read` on `workspaces` for the tenant's user, as `cpctl tokens
/// issue` does: (secret, id).
async fn reader(app: &TestApp, tenant: &Tenant, workspaces: &[Uuid]) -> (String, Uuid) {
    let input = control_plane::service::IssueTokenInput::new(
        control_plane::domain::TokenName::parse(&format!("r-{}", Uuid::new_v4().simple())).unwrap(),
        [Scope::AuditRead].into_iter().collect(),
        tenant.organisation_id,
        workspaces.to_vec(),
        vec![],
        control_plane::domain::ExpiresInDays::default(),
    )
    .unwrap();
    let issued = app
        .services
        .issue_token_for_user(tenant.user_id, input, &CorrelationId::generate())
        .await
        .unwrap();
    (issued.secret.expose().to_owned(), issued.record.id)
}

/// Revokes `token`'s access to `workspace` over HTTP with the tenant's admin token.
async fn revoke(app: &TestApp, tenant: &Tenant, workspace: Uuid, token: Uuid) {
    let response = app
        .delete_json(
            &format!("/v1/workspaces/{workspace}/access-tokens/{token}"),
            &tenant.token,
            &json!({"reason": "stream test"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// The sequence of the newest event of the workspace.
async fn head(app: &TestApp, workspace: Uuid) -> i64 {
    logged_events(app, workspace)
        .await
        .last()
        .map_or(0, |e| e.0)
}

#[tokio::test]
async fn a_revoked_grant_ends_the_stream_before_any_later_event() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let other = app.create_workspace(tenant.organisation_id, "other").await;
    let pool = create_pool(&app, ws, "revoked").await;
    let (token, token_id) = reader(&app, &tenant, &[ws, other]).await;
    let mut stream = Sse::open(&app, &token, ws, "", None).await;
    stream.expect_preamble().await;

    submit(&app, &tenant.token, ws, pool).await;
    let before = stream.next_event().await;
    assert_eq!(before.event, "runner_command.submitted");
    revoke(&app, &tenant, ws, token_id).await;
    let revoked_at = head(&app, ws).await;
    // Written after the revocation: never sent to the revoked token.
    submit(&app, &tenant.token, ws, pool).await;
    let after = head(&app, ws).await;
    assert!(after > revoked_at);

    stream.until_end().await.assert_prompt("access revoked");

    // The token keeps its other workspace, so reconnecting is refused like any request on it.
    let response = app.get(&stream_path(ws), &token).send().await.unwrap();
    assert_api_error(response, 403, "forbidden").await;
    let response = app.get(&stream_path(other), &token).send().await.unwrap();
    let status = response.status();
    assert_eq!(status, 200, "{}", response.text().await.unwrap());
}

#[tokio::test]
async fn a_token_revoked_entirely_by_cpctl_loses_its_stream_and_reconnects_to_401() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "cpctl").await;
    let (token, token_id) = reader(&app, &tenant, &[ws]).await;
    let mut stream = Sse::open(&app, &token, ws, "", None).await;
    stream.expect_preamble().await;
    submit(&app, &tenant.token, ws, pool).await;
    assert_eq!(stream.next_event().await.event, "runner_command.submitted");

    // What `cpctl tokens revoke` does: its own process (here its own pool) on the same records.
    let cpctl = control_plane::startup::open_services(&app.config)
        .await
        .expect("cpctl opens the records store");
    let outcome = cpctl
        .revoke_token_access_as_admin(
            Some(ws),
            token_id,
            control_plane::domain::RevocationReason::parse("offboarded").unwrap(),
            false,
            &CorrelationId::generate(),
        )
        .await
        .unwrap();
    assert!(
        outcome.token_revoked,
        "its only workspace: revoked entirely"
    );
    submit(&app, &tenant.token, ws, pool).await;

    stream.until_end().await.assert_prompt("access revoked");
    let response = app.get(&stream_path(ws), &token).send().await.unwrap();
    assert_api_error(response, 401, "unauthenticated").await;
}

#[tokio::test]
async fn a_token_that_expires_while_streaming_loses_its_stream() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "expiry").await;
    let (token, token_id) = reader(&app, &tenant, &[ws]).await;
    let expires_at = chrono::Utc::now() + chrono::TimeDelta::milliseconds(1500);
    let updated = sql_exec!(
        &mut app.db().await,
        "UPDATE tokens SET expires_at = $1 WHERE id = $2",
        expires_at,
        token_id
    )
    .unwrap();
    assert_eq!(updated, 1);
    let mut stream = Sse::open(&app, &token, ws, "", None).await;
    stream.expect_preamble().await;
    submit(&app, &tenant.token, ws, pool).await;
    assert_eq!(stream.next_event().await.event, "runner_command.submitted");

    let ending = stream.until_end().await;
    let ended = chrono::Utc::now();
    assert_eq!(ending.comment, "token expired", "{ending:?}");
    assert!(ending.events.is_empty(), "{ending:?}");
    assert!(ended >= expires_at, "ended before the expiry");
    assert!(
        ended - expires_at < chrono::TimeDelta::seconds(2),
        "ended {} after the expiry",
        ended - expires_at
    );
    // An event written after the expiry was not sent (the stream is over) and the token is dead.
    submit(&app, &tenant.token, ws, pool).await;
    let response = app.get(&stream_path(ws), &token).send().await.unwrap();
    assert_api_error(response, 401, "unauthenticated").await;
}

#[tokio::test]
async fn a_token_whose_expiry_is_brought_forward_loses_its_stream() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let (token, token_id) = reader(&app, &tenant, &[ws]).await;
    let mut stream = Sse::open(&app, &token, ws, "", None).await;
    stream.expect_preamble().await;
    // The stream opened with 90 days left; the record now says it is over.
    sql_exec!(
        &mut app.db().await,
        "UPDATE tokens SET expires_at = $1 WHERE id = $2",
        chrono::Utc::now() - chrono::TimeDelta::seconds(1),
        token_id
    )
    .unwrap();
    stream.until_end().await.assert_prompt("token expired");
}

#[tokio::test]
async fn a_policy_that_now_denies_the_stream_ends_it() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let mut stream = Sse::open(&app, &tenant.token, ws, "", None).await;
    stream.expect_preamble().await;
    crate::support::activate_deny_all(&app.services).await;
    stream.until_end().await.assert_prompt("access denied");
    let response = app
        .get(&stream_path(ws), &tenant.token)
        .send()
        .await
        .unwrap();
    assert_api_error(response, 403, "forbidden").await;
}

#[tokio::test]
async fn postgres_only_a_revocation_through_one_replica_ends_the_stream_on_another() {
    needs!(Postgres);
    const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
    // Replica A is this process's app; replica B a server process of its own.
    let a = spawn_app_with(|c| c.token_hash_key = Some(HASH_KEY.into())).await;
    let tenant = a.bootstrap().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&a, ws, "replicas").await;
    let b = ServerProcess::start(&a.config, HASH_KEY, RECORD_KEY);
    let (token, token_id) = reader(&a, &tenant, &[ws]).await;
    let mut stream = Sse::open_at(&a.client, &b.address, &token, ws, "", None).await;
    stream.expect_preamble().await;
    submit(&a, &tenant.token, ws, pool).await;
    assert_eq!(stream.next_event().await.event, "runner_command.submitted");

    revoke(&a, &tenant, ws, token_id).await;
    submit(&a, &tenant.token, ws, pool).await;
    stream.until_end().await.assert_prompt("access revoked");
    let response = a
        .client
        .get(format!("{}{}", b.address, stream_path(ws)))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_api_error(response, 401, "unauthenticated").await;
}

fn stream_path(workspace: impl std::fmt::Display) -> String {
    format!("/v1/workspaces/{workspace}/audit/stream")
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

/// A configuration with a small stream cap, and heartbeats every 100 ms so that the server
/// notices a closed stream's client at once (a failed write is how it notices).
fn capped(
    config: &mut control_plane::config::ServerConfig,
    cap: impl FnOnce(&mut control_plane::config::ServerConfig),
) {
    config.sse_heartbeat_ms = 100;
    cap(config);
}

/// The refusal of one stream too many: its status and code, `retry-after`, and the cap named.
async fn assert_refused(
    app: &TestApp,
    token: &str,
    workspace: Uuid,
    (status, code): (u16, &str),
    (scope, limit): (&str, u32),
) {
    let response = app
        .get(&format!("{}?after=0", stream_path(workspace)), token)
        .send()
        .await
        .unwrap();
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1, "retry-after in whole seconds, at least 1");
    let err = assert_api_error(response, status, code).await;
    assert_eq!(err["error"]["details"]["scope"], scope, "{err}");
    assert_eq!(err["error"]["details"]["limit"], limit, "{err}");
}

/// Opens a stream as soon as the server has given back the place of one whose client went
/// away, failing after 10 s. The server notices when a write to that client fails, so the
/// caller's app sends heartbeats often ([`capped`]).
async fn open_once_freed(app: &TestApp, token: &str, workspace: Uuid) -> Sse {
    let started = std::time::Instant::now();
    loop {
        let response = app
            .get(&stream_path(workspace), token)
            .send()
            .await
            .unwrap();
        if response.status() == 200 {
            let mut stream = Sse {
                response,
                buffer: Vec::new(),
            };
            stream.expect_preamble().await;
            return stream;
        }
        let status = response.status().as_u16();
        assert!(matches!(status, 429 | 503), "{status}");
        assert!(
            started.elapsed() < WAIT,
            "the closed stream's place was never freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_token_past_its_stream_cap_gets_a_429_until_one_of_its_streams_closes() {
    let app = spawn_app_with(|c| capped(c, |c| c.audit_streams_per_token = 2)).await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let (token, _) = reader(&app, &tenant, &[ws]).await;
    let mut first = Sse::open(&app, &token, ws, "", None).await;
    first.expect_preamble().await;
    let mut second = Sse::open(&app, &token, ws, "", None).await;
    second.expect_preamble().await;
    assert_refused(&app, &token, ws, (429, "rate_limited"), ("token", 2)).await;
    // Per token: another token on the same workspace is not affected.
    let mut others = Sse::open(&app, &tenant.token, ws, "", None).await;
    others.expect_preamble().await;

    drop(first);
    let mut third = open_once_freed(&app, &token, ws).await;
    assert_refused(&app, &token, ws, (429, "rate_limited"), ("token", 2)).await;
    // The streams that stayed open still work.
    create_pool(&app, ws, "capped").await;
    for stream in [&mut second, &mut third, &mut others] {
        assert_eq!(stream.next_event().await.event, "runner_pool.created");
    }
}

#[tokio::test]
async fn a_workspace_past_its_stream_cap_gets_a_429_until_one_of_its_streams_closes() {
    let app = spawn_app_with(|c| capped(c, |c| c.audit_streams_per_workspace = 2)).await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let other = app.create_workspace(tenant.organisation_id, "other").await;
    let (token, _) = reader(&app, &tenant, &[ws, other]).await;
    let first = Sse::open(&app, &tenant.token, ws, "", None).await;
    let _second = Sse::open(&app, &token, ws, "", None).await;
    // Whichever token asks.
    for asking in [&token, &tenant.token] {
        assert_refused(&app, asking, ws, (429, "rate_limited"), ("workspace", 2)).await;
    }
    // Per workspace: the token's other workspace is not affected.
    let _elsewhere = Sse::open(&app, &token, other, "", None).await;

    drop(first);
    let _third = open_once_freed(&app, &token, ws).await;
    assert_refused(
        &app,
        &tenant.token,
        ws,
        (429, "rate_limited"),
        ("workspace", 2),
    )
    .await;
}

#[tokio::test]
async fn an_organisation_past_its_stream_cap_gets_a_429_and_another_organisation_is_served() {
    let app = spawn_app_with(|c| capped(c, |c| c.audit_streams_per_organisation = 2)).await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let other = app.create_workspace(tenant.organisation_id, "other").await;
    let (token, _) = reader(&app, &tenant, &[ws, other]).await;
    let first = Sse::open(&app, &tenant.token, ws, "", None).await;
    let _second = Sse::open(&app, &token, other, "", None).await;
    // Whichever of its tokens asks, on whichever of its workspaces.
    for (asking, on) in [(&token, other), (&tenant.token, ws)] {
        assert_refused(&app, asking, on, (429, "rate_limited"), ("organisation", 2)).await;
    }
    // Another organisation on the same server is not affected.
    let stranger = app.bootstrap().await;
    let mut theirs = Sse::open(&app, &stranger.token, stranger.workspace_id, "", None).await;
    theirs.expect_preamble().await;

    drop(first);
    let _third = open_once_freed(&app, &token, ws).await;
}

#[tokio::test]
async fn a_process_past_its_stream_cap_answers_503_until_one_of_its_streams_closes() {
    let app = spawn_app_with(|c| capped(c, |c| c.audit_streams_per_process = 2)).await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let other = app.create_workspace(tenant.organisation_id, "other").await;
    let (token, _) = reader(&app, &tenant, &[other]).await;
    let first = Sse::open(&app, &tenant.token, ws, "", None).await;
    let _second = Sse::open(&app, &token, other, "", None).await;
    assert_eq!(app.services.audit_streams_open(), 2);
    // Any token, any workspace: the server is full.
    assert_refused(&app, &token, other, (503, "unavailable"), ("process", 2)).await;
    assert_refused(
        &app,
        &tenant.token,
        ws,
        (503, "unavailable"),
        ("process", 2),
    )
    .await;
    // A caller without access is told so, not asked to wait.
    let lacking = app
        .admin_token(&tenant, &[Scope::ActivityRead], &[ws], &[])
        .await;
    let response = app.get(&stream_path(ws), &lacking).send().await.unwrap();
    assert_api_error(response, 403, "forbidden").await;

    drop(first);
    let _third = open_once_freed(&app, &token, other).await;
    assert_refused(
        &app,
        &tenant.token,
        ws,
        (503, "unavailable"),
        ("process", 2),
    )
    .await;
}

#[tokio::test]
async fn a_stream_ends_at_its_max_age_and_resuming_with_last_event_id_misses_and_repeats_nothing() {
    const WRITES: usize = 30;
    // One stream per token: each reconnection is accepted only if the ended stream's place
    // was given back.
    let app = spawn_app_with(|c| {
        c.audit_stream_max_age_secs = 1;
        c.audit_streams_per_token = 1;
    })
    .await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "aging").await;
    let (token, _) = reader(&app, &tenant, &[ws]).await;

    // Commands keep being submitted across several of the stream's lifetimes.
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
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let mut seen: Vec<i64> = Vec::new();
    let mut last: Option<i64> = None;
    let mut lifetimes = 0;
    loop {
        let mut stream = Sse::open(&app, &token, ws, "?after=0", last).await;
        stream.expect_preamble().await;
        let ending = stream.until_end().await;
        assert_eq!(
            ending.comment, "max age reached; reconnect with Last-Event-ID",
            "{ending:?}"
        );
        assert!(ending.took < Duration::from_secs(5), "{ending:?}");
        lifetimes += 1;
        seen.extend(&ending.events);
        last = seen.last().copied().or(last);
        if writer.is_finished() && last == Some(head(&app, ws).await) {
            break;
        }
        assert!(lifetimes < 15, "the writer should be done: {seen:?}");
    }
    writer.await.expect("every submission succeeded");
    assert!(
        lifetimes >= 3,
        "the writes spanned several lifetimes: {lifetimes}"
    );
    let total = head(&app, ws).await;
    assert!(total >= WRITES as i64 + 3, "{total}");
    assert_eq!(
        seen,
        (1..=total).collect::<Vec<_>>(),
        "every sequence exactly once, in order"
    );
    assert_eq!(app.services.audit_streams_open(), 0);
}

#[tokio::test]
async fn a_replay_of_many_pages_sends_every_event_in_order_then_follows_live() {
    const LOGGED: usize = 20;
    const LIVE: usize = 12;
    let app = spawn_app_with(|c| c.audit_stream_replay_page = 4).await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "paged").await;
    for _ in 0..LOGGED {
        submit(&app, &tenant.token, ws, pool).await;
    }
    let logged = logged_events(&app, ws).await;
    assert!(logged.len() > 4 * 5, "several pages: {}", logged.len());

    // From the start, and from the middle of a page.
    for after in [0, 7] {
        let before = head(&app, ws).await;
        let mut stream = Sse::open(&app, &tenant.token, ws, &format!("?after={after}"), None).await;
        stream.expect_preamble().await;
        // Events keep arriving while the log is read page by page.
        let writer = {
            let client = app.client.clone();
            let url = app.url(&format!("/v1/workspaces/{ws}/runner-commands"));
            let token = tenant.token.clone();
            tokio::spawn(async move {
                for i in 0..LIVE {
                    let response = client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&json!({"poolId": pool, "command": format!("live-{i}")}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), 200);
                }
            })
        };
        let mut seen = Vec::new();
        let mut kinds = Vec::new();
        let target = before + LIVE as i64;
        while seen.last() != Some(&target) {
            let event = stream.next_event().await;
            seen.push(event.id);
            kinds.push(event.event);
        }
        writer.await.expect("every submission succeeded");
        let all = logged_events(&app, ws).await;
        let expected: Vec<&(i64, String)> = all.iter().filter(|(seq, _)| *seq > after).collect();
        assert_eq!(
            seen,
            expected.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
            "every event after {after} exactly once, in order"
        );
        assert_eq!(
            kinds,
            expected
                .iter()
                .map(|(_, kind)| kind.clone())
                .collect::<Vec<_>>()
        );
    }
}

/// The sequencing drill (issue #17): writers on three replicas at once, each event numbered
/// after its commit, and a reader that disconnects at random points and resumes with
/// `Last-Event-ID` on a random replica: every sequence is seen exactly once, in order.
#[tokio::test]
async fn postgres_only_concurrent_writers_on_three_replicas_and_a_resuming_reader_see_every_sequence_once()
 {
    use rand::Rng as _;
    needs!(Postgres);
    const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
    const WRITERS: usize = 6;
    const WRITES: usize = 30;
    let app = spawn_app_with(|c| c.token_hash_key = Some(HASH_KEY.into())).await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "drill").await;
    let a = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let b = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let bases = [app.address.clone(), a.address.clone(), b.address.clone()];
    let before = logged_events(&app, ws).await.len() as i64;

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let client = app.client.clone();
            let url = format!("{}/v1/workspaces/{ws}/runner-commands", bases[w % 3]);
            let token = tenant.token.clone();
            tokio::spawn(async move {
                for i in 0..WRITES {
                    let response = client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&json!({"poolId": pool, "command": format!("w{w}-{i}")}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), 200);
                }
            })
        })
        .collect();

    let total = before + (WRITERS * WRITES) as i64;
    let mut seen: Vec<i64> = Vec::new();
    let mut last: Option<i64> = None;
    while seen.last().copied().unwrap_or(0) < total {
        let (base, take) = {
            let mut rng = rand::rng();
            (&bases[rng.random_range(0..3)], rng.random_range(1..=25))
        };
        let mut stream = Sse::open_at(&app.client, base, &tenant.token, ws, "?after=0", last).await;
        stream.expect_preamble().await;
        for _ in 0..take {
            let event = stream.next_event().await;
            seen.push(event.id);
            last = Some(event.id);
            if event.id >= total {
                break;
            }
        }
    }
    for writer in writers {
        writer.await.expect("every write succeeded");
    }
    assert_eq!(
        seen,
        (1..=total).collect::<Vec<_>>(),
        "every sequence exactly once, in order"
    );
    // The durable log agrees: no event left unnumbered, no gap.
    let logged: Vec<i64> = logged_events(&app, ws).await.iter().map(|e| e.0).collect();
    assert_eq!(logged, (1..=total).collect::<Vec<_>>());
    drop((a, b));
}
