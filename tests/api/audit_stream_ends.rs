//! How an audit stream ends: when its token loses the grant, is revoked, expires or is denied
//! by a new policy (on this replica or another), and when a token, workspace, organisation or
//! process is past its cap on open streams (429 or 503 until one closes).

use std::time::Duration;

use control_plane::domain::{CorrelationId, Scope, Span};
use serde_json::json;
use uuid::Uuid;

use crate::support::sse::{
    PacedEnding, Sse, WAIT, fill_log, head, paced_relay, reader, stream_path, submit,
};
use crate::support::{
    Call, ServerProcess, Tenant, TestApp, assert_api_error, create_pool, needs, routes,
    spawn_app_with, sql_exec, tenant_app,
};

/// Revokes `token`'s access to `workspace` over HTTP with the tenant's admin token.
async fn revoke(app: &TestApp, tenant: &Tenant, workspace: Uuid, token: Uuid) {
    app.delete_json(
        &routes::revoke_token(workspace, token),
        &tenant.token,
        &json!({"reason": "stream test"}),
    )
    .ok_response()
    .await;
}

#[tokio::test]
async fn a_revoked_grant_ends_the_stream_before_any_later_event() {
    let (app, tenant) = tenant_app().await;
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
    app.get(&stream_path(ws), &token)
        .expect(403, "forbidden")
        .await;
    let response = app.get(&stream_path(other), &token).response().await;
    let status = response.status();
    assert_eq!(status, 200, "{}", response.text().await.unwrap());
}

#[tokio::test]
async fn a_token_revoked_entirely_by_cpctl_loses_its_stream_and_reconnects_to_401() {
    let (app, tenant) = tenant_app().await;
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
    app.get(&stream_path(ws), &token)
        .expect(401, "unauthenticated")
        .await;
}

#[tokio::test]
async fn a_token_that_expires_while_streaming_loses_its_stream() {
    let (app, tenant) = tenant_app().await;
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
    app.get(&stream_path(ws), &token)
        .expect(401, "unauthenticated")
        .await;
}

#[tokio::test]
async fn a_token_whose_expiry_is_brought_forward_loses_its_stream() {
    let (app, tenant) = tenant_app().await;
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
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let mut stream = Sse::open(&app, &tenant.token, ws, "", None).await;
    stream.expect_preamble().await;
    crate::support::activate_deny_all(&app.services).await;
    stream.until_end().await.assert_prompt("access denied");
    app.get(&stream_path(ws), &tenant.token)
        .expect(403, "forbidden")
        .await;
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
    a.client
        .get(format!("{}{}", b.address, stream_path(ws)))
        .bearer_auth(&token)
        .expect(401, "unauthenticated")
        .await;
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
        .response()
        .await;
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
        let response = app.get(&stream_path(workspace), token).response().await;
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
    app.get(&stream_path(ws), &lacking)
        .expect(403, "forbidden")
        .await;

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

/// Events in the log ahead of a slow reader: with their padding about 12 MB, about three times
/// what the server's send buffer and the reader's relay ([`paced_relay`]) hold on loopback, so
/// the server is still replaying when the reader's access ends.
const FILLER: usize = 6000;
/// How fast the slow reader drains its socket: the whole log would take it 6 s.
const SLOW: usize = 2 * 1024 * 1024;

/// An app whose streams replay 5 events a page, with a log of [`FILLER`] events, a pool to
/// write more with, and a member's reader token, whose slow stream from `after=0` has begun.
async fn slow_reader() -> (TestApp, Tenant, Tenant, Uuid, (String, Uuid), Sse) {
    let app = spawn_app_with(|c| c.audit_stream_replay_page = 5).await;
    let tenant = app.bootstrap().await;
    let member = app.member_of(&tenant).await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "slow").await;
    fill_log(&app, &tenant, ws, FILLER).await;
    let (token, token_id) = reader(&app, &member, &[ws]).await;
    let relay = paced_relay(&app.address, SLOW).await;
    let mut stream = Sse::open_at(&app.client, &relay, &token, ws, "?after=0", None).await;
    stream.expect_preamble().await;
    assert_eq!(stream.next_event().await.id, 1, "the replay has begun");
    (app, tenant, member, pool, (token, token_id), stream)
}

/// Cut off mid-replay, with nothing committed after `cut_off` (the head once access ended).
fn assert_cut_off_mid_replay(ending: &PacedEnding, cut_off: i64) {
    assert_eq!(ending.comment, "access revoked", "{ending:?}");
    let late: Vec<&i64> = ending.events.iter().filter(|seq| **seq > cut_off).collect();
    assert!(
        late.is_empty(),
        "sent {} events committed after access ended (head then {cut_off}): {:?}",
        late.len(),
        &late[..late.len().min(10)]
    );
    // Not at the head: the stream checked while it was still replaying.
    let last = ending.events.last().copied().unwrap_or(0);
    assert!(
        last < cut_off,
        "replayed up to {last} of {cut_off} before it was cut off ({} bytes in {:?})",
        ending.bytes,
        ending.took
    );
}

#[tokio::test]
async fn a_slow_replaying_reader_whose_user_is_disabled_is_cut_off_before_any_later_event() {
    let (app, tenant, member, pool, (token, _), mut stream) = slow_reader().await;
    let ws = tenant.workspace_id;
    // The reader has read one event; the server is blocked in the replay on its full socket.
    app.services
        .disable_user(member.user_id, None, &CorrelationId::generate())
        .await
        .unwrap();
    let cut_off = head(&app, ws).await;
    for _ in 0..5 {
        submit(&app, &tenant.token, ws, pool).await;
    }
    assert!(head(&app, ws).await > cut_off);

    let ending = stream.until_end_paced(SLOW, WAIT * 2).await;
    assert_cut_off_mid_replay(&ending, cut_off);
    app.get(&stream_path(ws), &token)
        .expect(401, "unauthenticated")
        .await;
}

#[tokio::test]
async fn a_slow_replaying_reader_whose_rotation_grace_ends_is_cut_off_before_any_later_event() {
    let (app, tenant, _member, pool, (old, token_id), mut stream) = slow_reader().await;
    let ws = tenant.workspace_id;
    let grace: Span = "1s".parse().unwrap();
    let rotated = app
        .services
        .rotate_token(token_id, grace, &CorrelationId::generate())
        .await
        .unwrap();
    // The witness that the grace is over: the old secret is refused like on any request (403
    // until then: the reader has no `activity:read`).
    let started = std::time::Instant::now();
    let activity = routes::activity(ws);
    while app.get(&activity, &old).status_code().await != 401 {
        assert!(started.elapsed() < WAIT, "the old secret still works");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(chrono::Utc::now() >= rotated.previous_valid_until);
    let cut_off = head(&app, ws).await;
    for _ in 0..5 {
        submit(&app, &tenant.token, ws, pool).await;
    }

    let ending = stream.until_end_paced(SLOW, WAIT * 2).await;
    assert_cut_off_mid_replay(&ending, cut_off);
}

#[tokio::test]
async fn a_follower_whose_user_is_disabled_gets_no_event_written_right_after() {
    let (app, tenant) = tenant_app().await;
    let member = app.member_of(&tenant).await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "follower").await;
    let (token, _) = reader(&app, &member, &[ws]).await;
    let mut stream = Sse::open(&app, &token, ws, "", None).await;
    stream.expect_preamble().await;
    submit(&app, &tenant.token, ws, pool).await;
    assert_eq!(stream.next_event().await.event, "runner_command.submitted");

    app.services
        .disable_user(member.user_id, None, &CorrelationId::generate())
        .await
        .unwrap();
    // At once, well within the stream's once-a-second re-check.
    for _ in 0..5 {
        submit(&app, &tenant.token, ws, pool).await;
    }
    stream.until_end().await.assert_prompt("access revoked");
}
