//! Activity pages below a cursor and stream replays from a streaming replica
//! (`CP_READ_DATABASE_URL`), on a primary and replica of the test's own
//! (`support/pg_replica.rs`). The replica serves while it keeps up; a first page, and a cursor
//! or `Last-Event-ID` ahead of what it has replayed, are answered by the primary; a replica
//! lagging past the limit is skipped, and one that stops, or stops answering, moves every read
//! to the primary without an error.

use std::time::Duration;

use serde_json::Value;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::pg_replica::PgPair;
use crate::support::sse::{Sse, head, reader};
use crate::support::*;

/// A server on the pair's primary, reading through its replica.
async fn app_on(pair: &PgPair, max_lag_ms: u64) -> TestApp {
    // A name no database on the shared server has: the test app drops its database by name.
    let name = format!("cp_replica_{}", Uuid::new_v4().simple());
    let mut config = test_config(&pair.primary_url(&name));
    config.read_database_url = Some(pair.replica_url(&name));
    config.read_replica_max_lag_ms = max_lag_ms;
    // Short replay pages, so a replay of a few events reads full pages.
    config.audit_stream_replay_page = 2;
    spawn_with_config(name, config).await
}

async fn replica_status(app: &TestApp) -> Value {
    let body: Value = app
        .client
        .get(app.url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["readReplica"].clone()
}

/// Waits until `/readyz` says the replica is `available`; when available, also until the
/// replica has replayed everything the primary had at the call (a `/readyz` answer may come
/// from a look taken before the test's last write).
async fn until_replica(app: &TestApp, pair: &PgPair, available: bool) {
    let started = std::time::Instant::now();
    let mut primary = PgConnection::connect(&pair.primary_url("postgres"))
        .await
        .expect("connect to the primary");
    let written: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&mut primary)
        .await
        .unwrap();
    loop {
        let status = replica_status(app).await;
        let ready = status["available"] == available
            && (!available || {
                let replayed: Option<bool> =
                    match PgConnection::connect(&pair.replica_url("postgres")).await {
                        Ok(mut replica) => {
                            sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn")
                                .bind(&written)
                                .fetch_one(&mut replica)
                                .await
                                .ok()
                        }
                        Err(_) => None,
                    };
                replayed == Some(true)
            });
        if ready {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the replica never became available={available}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn reads(metrics: &str, outcome: &str) -> u64 {
    let series = format!("replica_reads_total{{outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// The sequences of a page of activity, newest first.
async fn page(app: &TestApp, tenant: &Tenant, query: &str) -> Vec<i64> {
    let body: Value = app
        .get(
            &format!("{}{query}", routes::activity(tenant.workspace_id)),
            &tenant.token,
        )
        .ok()
        .await;
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["sequence"].as_i64().unwrap())
        .collect()
}

/// Writes `n` events and waits until the primary has numbered them; the new head.
async fn write_events(app: &TestApp, tenant: &Tenant, n: usize) -> i64 {
    let before = head(app, tenant.workspace_id).await;
    for _ in 0..n {
        app.create_environment(
            tenant.workspace_id,
            &format!("e-{}", Uuid::new_v4().simple()),
        )
        .await;
    }
    let head = head(app, tenant.workspace_id).await;
    assert!(head >= before + n as i64, "{before} then {head}");
    head
}

async fn replica_connection(pair: &PgPair) -> PgConnection {
    PgConnection::connect(&pair.replica_url("postgres"))
        .await
        .expect("connect to the replica")
}

fn pair() -> PgPair {
    PgPair::start().expect("a Postgres primary and replica of the test's own")
}

#[tokio::test]
async fn postgres_only_the_replica_serves_pages_below_a_cursor_unless_the_reader_is_ahead_of_it() {
    needs!(PostgresReplica);
    let pair = pair();
    // A wide limit, so the paused replica still serves while the cursor rule is checked.
    let app = app_on(&pair, 5_000).await;
    let tenant = app.bootstrap().await;
    // Issued first: its issuance is an event of the workspace too.
    let (secret, _) = reader(&app, &tenant, &[tenant.workspace_id]).await;
    let old_head = write_events(&app, &tenant, 3).await;
    until_replica(&app, &pair, true).await;
    let below = format!("?cursor={old_head}");
    let served = reads(&app.metrics().await, "served");
    assert_eq!(page(&app, &tenant, &below).await[0], old_head - 1);
    assert!(reads(&app.metrics().await, "served") > served);

    // The replica stops replaying; the primary goes on.
    let mut replica = replica_connection(&pair).await;
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(&mut replica)
        .await
        .unwrap();
    let new_head = write_events(&app, &tenant, 3).await;

    // A first page is the primary's: the writer reads its write at once.
    assert_eq!(page(&app, &tenant, "").await[0], new_head);
    // Below what the replica has, it still serves.
    let served = reads(&app.metrics().await, "served");
    assert_eq!(page(&app, &tenant, &below).await[0], old_head - 1);
    assert!(reads(&app.metrics().await, "served") > served);
    // A cursor ahead of the replica (a reader who saw the newest event) reads the primary.
    let behind = reads(&app.metrics().await, "behind");
    let below_newest = page(&app, &tenant, &format!("?cursor={}", new_head + 1)).await;
    assert_eq!(below_newest[..3], [new_head, new_head - 1, new_head - 2]);
    assert!(reads(&app.metrics().await, "behind") > behind);

    // So does a replay from a Last-Event-ID the replica has not reached.
    let mut stream = Sse::open(&app, &secret, tenant.workspace_id, "", Some(old_head)).await;
    stream.expect_preamble().await;
    for seq in old_head + 1..=new_head {
        assert_eq!(stream.next_event().await.id, seq);
    }
    drop(stream);

    // Past the limit the replica is skipped.
    until_replica(&app, &pair, false).await;
    let skipped = reads(&app.metrics().await, "skipped");
    assert_eq!(page(&app, &tenant, &below).await[0], old_head - 1);
    assert!(reads(&app.metrics().await, "skipped") > skipped);
    let metrics = app.metrics().await;
    assert!(metrics.contains("db_replica_available 0"), "{metrics}");

    // Replaying again, it catches up and serves.
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&mut replica)
        .await
        .unwrap();
    until_replica(&app, &pair, true).await;
    let served = reads(&app.metrics().await, "served");
    let newest = format!("?cursor={new_head}");
    assert_eq!(page(&app, &tenant, &newest).await[0], new_head - 1);
    assert!(reads(&app.metrics().await, "served") > served);
}

#[tokio::test]
async fn postgres_only_a_stopped_replica_moves_every_read_to_the_primary() {
    needs!(PostgresReplica);
    let pair = pair();
    let app = app_on(&pair, 1_000).await;
    let tenant = app.bootstrap().await;
    let (secret, _) = reader(&app, &tenant, &[tenant.workspace_id]).await;
    let newest = write_events(&app, &tenant, 3).await;
    until_replica(&app, &pair, true).await;
    // A replay of full pages is the replica's.
    let served = reads(&app.metrics().await, "served");
    let mut stream = Sse::open(&app, &secret, tenant.workspace_id, "?after=0", None).await;
    stream.expect_preamble().await;
    for seq in 1..=newest {
        assert_eq!(stream.next_event().await.id, seq);
    }
    drop(stream);
    assert!(reads(&app.metrics().await, "served") > served);

    pair.stop_replica().unwrap();
    // At once, before the monitor notices: each read is answered, none with an error.
    let below = format!("?cursor={newest}");
    for _ in 0..5 {
        assert_eq!(page(&app, &tenant, &below).await[0], newest - 1);
    }
    let mut stream = Sse::open(&app, &secret, tenant.workspace_id, "?after=0", None).await;
    stream.expect_preamble().await;
    for seq in 1..=newest {
        assert_eq!(stream.next_event().await.id, seq);
    }
    drop(stream);
    until_replica(&app, &pair, false).await;
    let status = replica_status(&app).await;
    assert_eq!(status["answering"], false, "{status}");
    // The process stays ready: its reads have somewhere to go.
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    // Back, it is first seen to catch up, then serves.
    pair.start_replica().unwrap();
    until_replica(&app, &pair, true).await;
    let served = reads(&app.metrics().await, "served");
    assert_eq!(page(&app, &tenant, &below).await[0], newest - 1);
    assert!(reads(&app.metrics().await, "served") > served);
}

/// A replica that takes a read and never answers (its processes stopped, as behind a partition
/// that drops packets) costs that read its timeout, then the primary answers: a page and a
/// replay read before the monitor notices are both answered, and counted `failed`.
#[tokio::test]
async fn postgres_only_a_replica_that_stops_answering_costs_a_read_its_timeout() {
    needs!(PostgresReplica);
    let pair = pair();
    let app = app_on(&pair, 60_000).await;
    let tenant = app.bootstrap().await;
    let (secret, _) = reader(&app, &tenant, &[tenant.workspace_id]).await;
    let newest = write_events(&app, &tenant, 3).await;
    until_replica(&app, &pair, true).await;
    // Its connections are open and pooled, so a read goes out on one at once.
    let below = format!("?cursor={newest}");
    assert_eq!(page(&app, &tenant, &below).await[0], newest - 1);

    pair.freeze_replica(true).unwrap();
    let failed = reads(&app.metrics().await, "failed");
    // Bounded, so that a read held by the frozen replica fails this test instead of hanging it.
    let started = std::time::Instant::now();
    let answered = tokio::time::timeout(Duration::from_secs(20), async {
        let timed_page = async {
            let sequences = page(&app, &tenant, &below).await;
            (sequences, started.elapsed())
        };
        let ((page_below, page_took), replay) = tokio::join!(timed_page, async {
            let mut stream = Sse::open(&app, &secret, tenant.workspace_id, "?after=0", None).await;
            stream.expect_preamble().await;
            let mut seen = Vec::new();
            for _ in 1..=newest {
                seen.push(stream.next_event().await.id);
            }
            seen
        });
        assert_eq!(page_below[0], newest - 1);
        assert_eq!(replay, (1..=newest).collect::<Vec<_>>());
        page_took
    })
    .await;
    let failed_after = reads(&app.metrics().await, "failed");
    pair.freeze_replica(false).unwrap();
    let page_took = answered.expect("a read waited on the frozen replica");
    // The replica's 1 s, then the primary; without it the read lane's 6 s deadline would end
    // the wait. A bound, not a speed target: 4 s leaves a loaded machine 3 s of slack.
    assert!(
        page_took < Duration::from_secs(4),
        "the page waited {page_took:?} on the frozen replica"
    );
    assert!(failed_after > failed, "no read reached the frozen replica");

    // Answering again, it is first seen to catch up, then serves.
    until_replica(&app, &pair, true).await;
    let served = reads(&app.metrics().await, "served");
    assert_eq!(page(&app, &tenant, &below).await[0], newest - 1);
    assert!(reads(&app.metrics().await, "served") > served);
}
