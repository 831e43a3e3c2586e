//! GET /v1/workspaces/{workspaceId}/audit/stream: Server-Sent Events, replayed from the durable
//! log after a sequence, then live, with no gap and no duplicate across reconnections.

use std::time::Duration;

use control_plane::domain::Scope;
use serde_json::json;

use crate::support::sse::{Sse, WAIT, head, logged_events, reader, stream_path, submit};
use crate::support::{
    Call, ServerProcess, create_pool, issuance_body, needs, routes, spawn_app_with, tenant_app,
};

#[tokio::test]
async fn after_zero_replays_the_log_in_order_then_follows_live() {
    let (app, tenant) = tenant_app().await;
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
    let (app, tenant) = tenant_app().await;
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
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "resume").await;

    // Commands keep being submitted while the client reads, disconnects and reconnects.
    let writer = {
        let client = app.client.clone();
        let url = app.url(&routes::runner_commands(ws));
        let token = tenant.token.clone();
        tokio::spawn(async move {
            for i in 0..WRITES {
                client
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&json!({"poolId": pool, "command": format!("step-{i}")}))
                    .ok_response()
                    .await;
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
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let busy = create_pool(&app, ws, "busy").await;
    let idle = create_pool(&app, ws, "idle").await;
    submit(&app, &tenant.token, ws, busy).await;
    app.delete_json(
        &routes::runner_pool(ws, idle),
        &tenant.token,
        &json!({"reason": "unused"}),
    )
    .ok_response()
    .await;

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
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let lacking = app
        .admin_token(
            &tenant,
            &[Scope::ActivityRead, Scope::RunnerCommandsSubmit],
            &[ws],
            &[],
        )
        .await;
    app.get(&stream_path(ws), &lacking)
        .expect(403, "forbidden")
        .await;

    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let other = app.bootstrap().await;
    for workspace in [
        second.to_string(),
        other.workspace_id.to_string(),
        "not-a-uuid".to_owned(),
    ] {
        app.get(&stream_path(&workspace), &tenant.token)
            .expect(403, "forbidden")
            .await;
    }

    app.request(reqwest::Method::GET, &stream_path(ws))
        .expect(401, "unauthenticated")
        .await;

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
    let (app, tenant) = tenant_app().await;
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
        let err = request.expect(400, "validation_failed").await;
        assert_eq!(
            err["error"]["details"]["field"], field,
            "{query} {last_event_id:?}"
        );
    }
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
        let url = app.url(&routes::runner_commands(ws));
        let token = tenant.token.clone();
        tokio::spawn(async move {
            for i in 0..WRITES {
                client
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&json!({"poolId": pool, "command": format!("step-{i}")}))
                    .ok_response()
                    .await;
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
            let url = app.url(&routes::runner_commands(ws));
            let token = tenant.token.clone();
            tokio::spawn(async move {
                for i in 0..LIVE {
                    client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&json!({"poolId": pool, "command": format!("live-{i}")}))
                        .ok_response()
                        .await;
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
            let url = format!("{}{}", bases[w % 3], routes::runner_commands(ws));
            let token = tenant.token.clone();
            tokio::spawn(async move {
                for i in 0..WRITES {
                    client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&json!({"poolId": pool, "command": format!("w{w}-{i}")}))
                        .ok_response()
                        .await;
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
