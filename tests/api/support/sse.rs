//! A client of the audit stream (`GET /v1/workspaces/{workspaceId}/audit/stream`) that reads
//! Server-Sent Events block by block, with a bound on every wait, and what the tests compare
//! it with: the workspace's durable log, and commands submitted to make new events.

use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use super::client::Call;
use super::fixtures::Tenant;
use super::server::TestApp;

/// Longest wait for anything on a stream, so a failing test cannot hang.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// One event of the stream.
pub(crate) struct Event {
    pub(crate) id: i64,
    pub(crate) event: String,
    pub(crate) data: Value,
}

/// A client of the audit stream that reads whole blocks (one event or comment each).
pub(crate) struct Sse {
    pub(crate) response: reqwest::Response,
    pub(crate) buffer: Vec<u8>,
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
    pub(crate) async fn open_at(
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
    pub(crate) async fn block(&mut self) -> String {
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
pub(crate) struct Ending {
    /// Ids of the events received before the end.
    pub(crate) events: Vec<i64>,
    /// The last comment (without `: `), the reason the server gave.
    pub(crate) comment: String,
    /// From the start of the wait to the end of the response.
    pub(crate) took: Duration,
}

impl Sse {
    /// Takes every whole block buffered so far: event ids into `events`, and the last comment
    /// (without `: `) into `comment`.
    fn take_blocks(&mut self, events: &mut Vec<i64>, comment: &mut String) {
        while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
            let block = String::from_utf8(block[..end].to_vec()).expect("UTF-8");
            for line in block.lines() {
                if let Some(id) = line.strip_prefix("id: ") {
                    events.push(id.parse().expect("a numeric id"));
                } else if let Some(text) = line.strip_prefix(": ") {
                    *comment = text.to_owned();
                }
            }
        }
    }

    /// Reads every block until the response ends (failing after 10 s).
    pub(crate) async fn until_end(&mut self) -> Ending {
        let started = std::time::Instant::now();
        let mut events = Vec::new();
        let mut comment = String::new();
        loop {
            self.take_blocks(&mut events, &mut comment);
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
    pub(crate) fn assert_prompt(&self, reason: &str) {
        assert_eq!(self.comment, reason, "{self:?}");
        assert!(self.events.is_empty(), "sent after access ended: {self:?}");
        assert!(self.took < Duration::from_secs(2), "{self:?}");
    }
}

pub(crate) fn stream_path(workspace: impl std::fmt::Display) -> String {
    format!("/v1/workspaces/{workspace}/audit/stream")
}

/// Submits a command over HTTP; returns its id.
pub(crate) async fn submit(app: &TestApp, token: &str, workspace: Uuid, pool: Uuid) -> Uuid {
    let body: Value = app
        .post_json(
            &format!("/v1/workspaces/{workspace}/runner-commands"),
            token,
            &json!({"poolId": pool, "command": "echo"}),
        )
        .ok()
        .await;
    body["command"]["id"].as_str().unwrap().parse().unwrap()
}

/// The workspace's durable log: (sequence, type), oldest first.
pub(crate) async fn logged_events(app: &TestApp, workspace: Uuid) -> Vec<(i64, String)> {
    crate::support::sql_all!(
        &mut app.db().await,
        (i64, String),
        "SELECT seq, event_type FROM audit_events WHERE workspace_id = $1 ORDER BY seq",
        workspace
    )
    .unwrap()
}

/// Issues a token with `audit:read` on `workspaces` for the tenant's user, as `cpctl tokens
/// issue` does: (secret, id).
pub(crate) async fn reader(app: &TestApp, tenant: &Tenant, workspaces: &[Uuid]) -> (String, Uuid) {
    let input = control_plane::service::IssueTokenInput::new(
        control_plane::domain::TokenName::parse(&format!("r-{}", Uuid::new_v4().simple())).unwrap(),
        [control_plane::domain::Scope::AuditRead]
            .into_iter()
            .collect(),
        tenant.organisation_id,
        workspaces.to_vec(),
        vec![],
        control_plane::domain::ExpiresInDays::default(),
    )
    .unwrap();
    let issued = app
        .services
        .issue_token_for_user(
            tenant.user_id,
            input,
            &control_plane::domain::CorrelationId::generate(),
        )
        .await
        .unwrap();
    (issued.secret.expose().to_owned(), issued.record.id)
}

/// The sequence of the newest event of the workspace.
pub(crate) async fn head(app: &TestApp, workspace: Uuid) -> i64 {
    logged_events(app, workspace)
        .await
        .last()
        .map_or(0, |e| e.0)
}

/// Bytes of padding in each event [`fill_log`] writes: with their envelope about 2 KB on the
/// stream, so a few thousand of them are more than a socket's buffers hold.
pub(crate) const FILLER_PAD: usize = 1800;

/// Writes `count` events into the workspace's log in one transaction, straight through the
/// records store (with a throwaway token of the tenant's user, whose issuance carries them):
/// thousands of events in a second, where as many requests would take a minute.
pub(crate) async fn fill_log(app: &TestApp, tenant: &Tenant, workspace: Uuid, count: usize) {
    use control_plane::domain::{Actor, NewAuditEvent};
    use control_plane::storage::{NewToken, TokenRecord, WriteContext};
    let now = chrono::Utc::now();
    let record = TokenRecord {
        id: Uuid::new_v4(),
        public_id: Uuid::new_v4().simple().to_string(),
        user_id: tenant.user_id,
        organisation_id: tenant.organisation_id,
        name: format!("filler-{}", Uuid::new_v4().simple()),
        scopes: vec![],
        workspace_ids: vec![workspace],
        environment_ids: vec![],
        created_at: now,
        expires_at: now + chrono::TimeDelta::days(1),
        revoked_at: None,
        issued_by_token_id: None,
        last_use: None,
    };
    let pad = "x".repeat(FILLER_PAD);
    let events: Vec<NewAuditEvent> = (0..count)
        .map(|n| NewAuditEvent {
            organisation_id: tenant.organisation_id,
            workspace_id: Some(workspace),
            event_type: "test.filler",
            actor: Actor::admin(),
            target_kind: "token",
            target_id: record.id,
            correlation_id: format!("filler-{n}"),
            occurred_at: now,
            data: json!({ "n": n, "pad": pad }),
        })
        .collect();
    let cid = control_plane::domain::CorrelationId::generate();
    app.services
        .store()
        .insert_token(
            &WriteContext::admin(&cid),
            &NewToken {
                record,
                secret_hash: Uuid::new_v4().as_bytes().to_vec(),
            },
            &events,
            u32::MAX,
            now,
        )
        .await
        .expect("write the filler events");
}

/// What a paced reader received up to the stream's end.
#[derive(Debug)]
pub(crate) struct PacedEnding {
    pub(crate) events: Vec<i64>,
    pub(crate) comment: String,
    pub(crate) bytes: usize,
    pub(crate) took: Duration,
}

impl Sse {
    /// Reads every block until the response ends, at no more than `bytes_per_sec`: a client
    /// that drains its socket slowly, so the server stays behind it (mid-replay) the while.
    /// Fails if the stream has not ended within `deadline`.
    pub(crate) async fn until_end_paced(
        &mut self,
        bytes_per_sec: usize,
        deadline: Duration,
    ) -> PacedEnding {
        let started = std::time::Instant::now();
        let (mut events, mut comment, mut bytes) = (Vec::new(), String::new(), 0usize);
        loop {
            self.take_blocks(&mut events, &mut comment);
            // Pacing, not a wait for an absence: the end comment is what the caller asserts on.
            let due = Duration::from_secs_f64(bytes as f64 / bytes_per_sec as f64);
            if let Some(ahead) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(ahead).await;
            }
            let left = deadline.saturating_sub(started.elapsed());
            let chunk = tokio::time::timeout(left, self.response.chunk())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "the stream did not end within {deadline:?}: {} events, the last {:?}, \
                         {bytes} bytes",
                        events.len(),
                        events.last()
                    )
                })
                .expect("read the stream");
            match chunk {
                Some(chunk) => {
                    bytes += chunk.len();
                    self.buffer.extend_from_slice(&chunk);
                }
                None => {
                    assert!(self.buffer.is_empty(), "a partial block {:?}", self.buffer);
                    return PacedEnding {
                        events,
                        comment,
                        bytes,
                        took: started.elapsed(),
                    };
                }
            }
        }
    }
}

/// A relay to the server at `base` (`http://host:port`) that passes the server's bytes on at
/// no more than `bytes_per_sec`, reading them through a socket with a fixed 64 KiB receive
/// buffer; answers the relay's base. A slow reader behind it keeps the server mid-replay: read
/// directly, Linux would auto-tune the reader's loopback receive buffer up to
/// `net.ipv4.tcp_rmem`'s maximum (32 MiB on CI's machines), which holds a whole 12 MB replay
/// before the server's first recheck. A fixed `SO_RCVBUF` turns that tuning off, so at most the
/// server's send buffer (`tcp_wmem`'s maximum, 4 MiB) and 64 KiB are in flight.
pub(crate) async fn paced_relay(base: &str, bytes_per_sec: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream: std::net::SocketAddr = base
        .trim_start_matches("http://")
        .parse()
        .expect("a loopback address");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((down, _)) = listener.accept().await {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(64 * 1024).unwrap();
            let Ok(up) = socket.connect(upstream).await else {
                continue;
            };
            let (mut down_read, mut down_write) = down.into_split();
            let (mut up_read, mut up_write) = up.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut down_read, &mut up_write).await;
            });
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let (mut sent, mut chunk) = (0usize, vec![0u8; 16 * 1024]);
                loop {
                    // Pacing the relay, not waiting for an absence.
                    let due = Duration::from_secs_f64(sent as f64 / bytes_per_sec as f64);
                    if let Some(ahead) = due.checked_sub(started.elapsed()) {
                        tokio::time::sleep(ahead).await;
                    }
                    match up_read.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if down_write.write_all(&chunk[..n]).await.is_err() {
                                break;
                            }
                            sent += n;
                        }
                    }
                }
                let _ = down_write.shutdown().await;
            });
        }
    });
    relay
}
