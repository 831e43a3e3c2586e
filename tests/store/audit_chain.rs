//! The audit log's hash chain, on each backend: `verify` passes on an untouched
//! log and names the first event changed, deleted, inserted or reordered directly in the
//! database; retention removes only a run of the oldest events, behind a checkpoint the chain
//! is verified from.

use chrono::{DateTime, Utc};
use control_plane::domain::WebhookSigner;
use control_plane::domain::audit_proof::{ProofKeys, sign_head};
use control_plane::domain::{Actor, NewAuditEvent};
use control_plane::service::audit_integrity::{
    ChainProblem, ChainReport, RetentionSealer, verify_chain,
};
use control_plane::storage::{TimeWindow, WriteContext};
use serde_json::json;
use uuid::Uuid;

use crate::support::{Backend, Tenant, TestStore, each_backend, tenant, test_name};

/// Writes one workspace event (through `setting_put`, which writes any event it is given).
async fn write_event(db: &TestStore, tenant: &Tenant, n: usize, at: DateTime<Utc>) {
    let event = NewAuditEvent {
        organisation_id: tenant.organisation_id,
        workspace_id: Some(tenant.workspace_id),
        event_type: "test.event",
        actor: Actor::user_only(tenant.user_id),
        target_kind: "test",
        target_id: Uuid::new_v4(),
        correlation_id: format!("chain-{n:04}"),
        occurred_at: at,
        data: json!({ "n": n, "nested": { "z": [1, 2], "a": "x" } }),
    };
    db.store
        .setting_put(&WriteContext::system(), &format!("k{n}"), "v", &event)
        .await
        .unwrap();
}

/// A tenant whose workspace holds `count` events (the first is `workspace.created`).
async fn log_of(db: &TestStore, count: usize) -> Tenant {
    let tenant = tenant(db.store.as_ref()).await;
    for n in 2..=count {
        write_event(db, &tenant, n, Utc::now()).await;
    }
    tenant
}

async fn verify(db: &TestStore, tenant: &Tenant) -> ChainReport {
    verify_chain(db.store.as_ref(), tenant.workspace_id, keys(), None)
        .await
        .unwrap()
        .expect("the workspace exists")
}

fn signer() -> WebhookSigner {
    WebhookSigner::from_seeds(&[vec![3; 32]]).unwrap()
}

fn keys() -> ProofKeys {
    ProofKeys::new(signer().public_keys().into_iter().map(|k| k.key))
}

fn broken_at(report: &ChainReport) -> Option<(ChainProblem, i64)> {
    report.broken.as_ref().map(|b| (b.problem, b.sequence))
}

fn new_id(db: &TestStore) -> &'static str {
    match db.backend {
        Backend::Postgres => "gen_random_uuid()",
        Backend::Sqlite => "randomblob(16)",
    }
}

#[tokio::test]
async fn an_untouched_log_verifies() {
    each_backend(test_name!(), |db| async move {
        let tenant = log_of(&db, 6).await;
        let report = verify(&db, &tenant).await;
        assert!(report.intact(), "{:?}: {report:?}", db.backend);
        assert_eq!((report.verified, report.head_seq), (6, 6));
        let hashed = db
            .count("SELECT count(*) FROM audit_events WHERE seq IS NOT NULL AND hash IS NOT NULL")
            .await;
        assert_eq!(hashed, 6);
    })
    .await;
}

#[tokio::test]
async fn a_changed_event_is_named() {
    each_backend(test_name!(), |db| async move {
        let tenant = log_of(&db, 6).await;
        db.exec(r#"UPDATE audit_events SET data = '{"n": 99}' WHERE seq = 3"#)
            .await;
        let report = verify(&db, &tenant).await;
        assert_eq!(
            broken_at(&report),
            Some((ChainProblem::Changed, 3)),
            "{:?}",
            db.backend
        );
        assert_eq!(report.verified, 2);
    })
    .await;
}

#[tokio::test]
async fn a_changed_time_or_actor_is_named() {
    each_backend(test_name!(), |db| async move {
        let tenant = log_of(&db, 6).await;
        db.exec("UPDATE audit_events SET correlation_id = 'other-0001' WHERE seq = 6")
            .await;
        let report = verify(&db, &tenant).await;
        assert_eq!(
            broken_at(&report),
            Some((ChainProblem::Changed, 6)),
            "{:?}",
            db.backend
        );
    })
    .await;
}

#[tokio::test]
async fn a_deleted_event_is_named() {
    each_backend(test_name!(), |db| async move {
        let tenant = log_of(&db, 6).await;
        db.exec("DELETE FROM audit_events WHERE seq = 4").await;
        let report = verify(&db, &tenant).await;
        assert_eq!(
            broken_at(&report),
            Some((ChainProblem::Deleted, 4)),
            "{:?}",
            db.backend
        );

        // The newest one too: the workspace's head still counts it.
        let tenant = log_of(&db, 5).await;
        db.exec(
            "DELETE FROM audit_events WHERE seq = 5 AND event_type = 'test.event' \
             AND correlation_id = 'chain-0005' AND workspace_id = \
             (SELECT id FROM workspaces WHERE audit_seq = 5)",
        )
        .await;
        let report = verify(&db, &tenant).await;
        assert_eq!(
            broken_at(&report),
            Some((ChainProblem::Deleted, 5)),
            "{:?}",
            db.backend
        );
    })
    .await;
}

#[tokio::test]
async fn an_inserted_event_is_named() {
    each_backend(test_name!(), |db| async move {
        let tenant = log_of(&db, 6).await;
        // Make room at 4 (two steps: the unique index is checked row by row), then forge one.
        db.exec("UPDATE audit_events SET seq = -seq - 1 WHERE seq >= 4")
            .await;
        db.exec("UPDATE audit_events SET seq = -seq WHERE seq < 0")
            .await;
        db.exec(&format!(
            "INSERT INTO audit_events (id, organisation_id, workspace_id, seq, event_type,
                 actor_kind, actor_id, target_kind, target_id, correlation_id, occurred_at,
                 data, hash)
             SELECT {}, organisation_id, workspace_id, 4, event_type, actor_kind, actor_id,
                 target_kind, target_id, correlation_id, occurred_at, data, hash
             FROM audit_events WHERE seq = 3",
            new_id(&db)
        ))
        .await;
        db.exec("UPDATE workspaces SET audit_seq = audit_seq + 1 WHERE audit_seq > 0")
            .await;
        let report = verify(&db, &tenant).await;
        assert_eq!(
            broken_at(&report),
            Some((ChainProblem::Inserted, 4)),
            "{:?}",
            db.backend
        );
        assert_eq!(report.verified, 3);
    })
    .await;
}

#[tokio::test]
async fn reordered_events_are_named() {
    each_backend(test_name!(), |db| async move {
        // Two neighbours swapped.
        let tenant = log_of(&db, 6).await;
        db.exec("UPDATE audit_events SET seq = -1 WHERE seq = 3")
            .await;
        db.exec("UPDATE audit_events SET seq = 3 WHERE seq = 4")
            .await;
        db.exec("UPDATE audit_events SET seq = 4 WHERE seq = -1")
            .await;
        let report = verify(&db, &tenant).await;
        assert_eq!(
            broken_at(&report),
            Some((ChainProblem::Reordered, 3)),
            "{:?}",
            db.backend
        );
        assert_eq!(report.broken.unwrap().found_at, Some(4));
    })
    .await;
}

#[tokio::test]
async fn distant_events_swapped_are_named() {
    each_backend(test_name!(), |db| async move {
        let tenant = log_of(&db, 7).await;
        db.exec("UPDATE audit_events SET seq = -1 WHERE seq = 2")
            .await;
        db.exec("UPDATE audit_events SET seq = 2 WHERE seq = 6")
            .await;
        db.exec("UPDATE audit_events SET seq = 6 WHERE seq = -1")
            .await;
        let report = verify(&db, &tenant).await;
        assert_eq!(
            broken_at(&report),
            Some((ChainProblem::Reordered, 2)),
            "{:?}",
            db.backend
        );
        assert_eq!(report.broken.unwrap().found_at, Some(6));
    })
    .await;
}

#[tokio::test]
async fn retention_removes_the_oldest_run_and_the_chain_verifies_from_its_checkpoint() {
    each_backend(test_name!(), |db| async move {
        let tenant = log_of(&db, 4).await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let cutoff = Utc::now();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        for n in 5..=8 {
            write_event(&db, &tenant, n, Utc::now()).await;
        }
        // An old event after a young one stays: only a run from the oldest goes.
        write_event(&db, &tenant, 9, cutoff - chrono::Duration::hours(1)).await;
        let store = db.store.as_ref();
        let now = Utc::now();
        let ws = tenant.workspace_id;
        let signer = signer();
        let sealer = RetentionSealer::new(&signer, now);
        assert_eq!(
            store
                .remove_expired_events(ws, cutoff, 3, now, &sealer)
                .await
                .unwrap(),
            3
        );
        assert_eq!(
            store
                .remove_expired_events(ws, cutoff, 3, now, &sealer)
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            store
                .remove_expired_events(ws, cutoff, 3, now, &sealer)
                .await
                .unwrap(),
            0
        );
        assert_eq!(store.removed_through(ws).await.unwrap(), Some(4));
        let checkpoint = store.latest_checkpoint(ws).await.unwrap().unwrap();
        assert_eq!((checkpoint.last_seq, checkpoint.removed), (4, 1));
        assert!(checkpoint.hash.is_some());

        let report = verify(&db, &tenant).await;
        assert!(report.intact(), "{:?}: {report:?}", db.backend);
        assert_eq!((report.checkpoint_seq, report.verified), (4, 5));
        let left = store
            .export_events(ws, 0, TimeWindow::default(), 100)
            .await
            .unwrap();
        let seqs: Vec<i64> = left.iter().filter_map(|e| e.sequence).collect();
        assert_eq!(seqs, vec![5, 6, 7, 8, 9]);

        // Still tamper-evident after retention.
        db.exec(r#"UPDATE audit_events SET data = '{"n": 0}' WHERE seq = 7"#)
            .await;
        let report = verify(&db, &tenant).await;
        assert_eq!(
            broken_at(&report),
            Some((ChainProblem::Changed, 7)),
            "{:?}",
            db.backend
        );
    })
    .await;
}

#[tokio::test]
async fn an_export_window_keeps_the_events_within_it() {
    each_backend(test_name!(), |db| async move {
        let tenant = log_of(&db, 1).await;
        let base = Utc::now() - chrono::Duration::hours(10);
        for n in 2..=6 {
            write_event(&db, &tenant, n, base + chrono::Duration::hours(n as i64)).await;
        }
        let window = TimeWindow {
            since: Some(base + chrono::Duration::hours(3)),
            until: Some(base + chrono::Duration::hours(5)),
        };
        let events = db
            .store
            .export_events(tenant.workspace_id, 0, window, 100)
            .await
            .unwrap();
        let seqs: Vec<i64> = events.iter().filter_map(|e| e.sequence).collect();
        assert_eq!(seqs, vec![3, 4], "{:?}", db.backend);
        // Paged: after the first.
        let events = db
            .store
            .export_events(tenant.workspace_id, 3, window, 100)
            .await
            .unwrap();
        assert_eq!(events.len(), 1);
    })
    .await;
}

/// A backlog larger than one read of a numbering pass (a replica down for a while) is numbered
/// whole, in order and chained. Postgres only: SQLite numbers each event as it is written.
#[tokio::test]
async fn a_backlog_of_unnumbered_events_is_numbered_in_order_across_reads() {
    each_backend(test_name!(), |db| async move {
        if db.backend != Backend::Postgres {
            return;
        }
        let tenant = log_of(&db, 2).await;
        db.exec(&format!(
            "INSERT INTO audit_events (id, organisation_id, workspace_id, event_type, actor_kind,
                 target_kind, target_id, correlation_id, occurred_at, data)
             SELECT gen_random_uuid(), '{org}', '{ws}', 'test.backlog', 'system', 'test',
                    gen_random_uuid(), 'backlog-' || n, now(), jsonb_build_object('n', n)
             FROM generate_series(1, 12001) AS n",
            org = tenant.organisation_id,
            ws = tenant.workspace_id,
        ))
        .await;
        // The next write's pass numbers the backlog before the write's own event.
        write_event(&db, &tenant, 3, Utc::now()).await;
        let waiting = db
            .count(
                "SELECT count(*) FROM audit_events WHERE seq IS NULL AND workspace_id IS NOT NULL",
            )
            .await;
        assert_eq!(waiting, 0);
        let in_order = db
            .count(
                "SELECT count(*) FROM audit_events
                 WHERE event_type = 'test.backlog' AND seq = 2 + (data->>'n')::bigint",
            )
            .await;
        assert_eq!(in_order, 12001, "numbered in the order they were appended");
        let report = verify(&db, &tenant).await;
        assert!(report.intact(), "{report:?}");
        assert_eq!(report.head_seq, 2 + 12001 + 1);
    })
    .await;
}

/// A write waits only for its own workspace's partition of the numbering lock: events waiting
/// in another partition stay unnumbered until that partition's pass or the sweep, and each
/// workspace's sequence stays gap-free. Pins that the pass's SQL picks the partition the
/// writer computed. Postgres only.
#[tokio::test]
async fn a_write_numbers_its_partition_and_the_sweep_numbers_the_rest() {
    use control_plane::storage::postgres::numbering_partition;
    each_backend(test_name!(), |db| async move {
        if db.backend != Backend::Postgres {
            return;
        }
        let mine = log_of(&db, 1).await;
        let mut other = log_of(&db, 1).await;
        while numbering_partition(other.workspace_id) == numbering_partition(mine.workspace_id) {
            other = log_of(&db, 1).await;
        }
        // Left by a writer that died before its pass.
        db.exec(&format!(
            "INSERT INTO audit_events (id, organisation_id, workspace_id, event_type, actor_kind,
                 target_kind, target_id, correlation_id, occurred_at, data)
             SELECT gen_random_uuid(), '{org}', '{ws}', 'test.orphan', 'system', 'test',
                    gen_random_uuid(), 'orphan-' || n, now(), '{{}}'::jsonb
             FROM generate_series(1, 3) AS n",
            org = other.organisation_id,
            ws = other.workspace_id,
        ))
        .await;
        write_event(&db, &mine, 2, Utc::now()).await;
        let unnumbered = |ws: Uuid| {
            format!("SELECT count(*) FROM audit_events WHERE workspace_id = '{ws}' AND seq IS NULL")
        };
        assert_eq!(db.count(&unnumbered(mine.workspace_id)).await, 0);
        assert_eq!(
            db.count(&unnumbered(other.workspace_id)).await,
            3,
            "another partition's events wait for its own pass"
        );
        db.store.settle_events().await.unwrap();
        assert_eq!(db.count(&unnumbered(other.workspace_id)).await, 0);
        for tenant in [&mine, &other] {
            let report = verify(&db, tenant).await;
            assert!(report.intact(), "{report:?}");
        }
        assert_eq!(verify(&db, &other).await.head_seq, 4);
    })
    .await;
}

#[tokio::test]
async fn a_signed_head_is_kept_once_however_many_replicas_sign_it() {
    each_backend(test_name!(), |db| async move {
        let tenant = log_of(&db, 4).await;
        let store = db.store.clone();
        let ws = tenant.workspace_id;
        let due = store.heads_to_sign(1000, 0).await.unwrap();
        let head = due
            .iter()
            .find(|(id, _)| *id == ws)
            .map(|(_, h)| h.clone())
            .expect("a head above its (absent) signed head is due");
        let hash = head.hash.clone().unwrap();
        // Two replicas sign the same head at different times: the first row is kept.
        let signer = signer();
        let (a, b) = (
            sign_head(&signer, ws, head.seq, &hash, 1_000),
            sign_head(&signer, ws, head.seq, &hash, 2_000),
        );
        let (sa, sb) = (store.clone(), store.clone());
        let (ra, rb) = tokio::join!(
            async move { sa.insert_signed_head(&a).await.unwrap() },
            async move { sb.insert_signed_head(&b).await.unwrap() },
        );
        assert!(
            ra ^ rb,
            "{:?}: exactly one insert wins ({ra}, {rb})",
            db.backend
        );
        let kept = store.signed_heads(ws, 0, i64::MAX).await.unwrap();
        assert_eq!(kept.len(), 1, "{:?}", db.backend);
        assert!(keys().verifies_head(&kept[0]));
        assert!(
            !store
                .heads_to_sign(1000, 0)
                .await
                .unwrap()
                .iter()
                .any(|(id, _)| *id == ws),
            "{:?}: a signed head is not due again",
            db.backend
        );
        let report = verify(&db, &tenant).await;
        assert!(report.intact(), "{:?}: {report:?}", db.backend);
        assert_eq!(report.signed_heads_matched, 1);
    })
    .await;
}

/// The signer's batches put never-signed workspaces first, then the oldest signature: a fixed
/// order by id would starve the workspaces past the first batch (issue 56 review, L1).
#[tokio::test]
async fn heads_to_sign_puts_the_never_signed_first() {
    each_backend(test_name!(), |db| async move {
        let (x, y) = (log_of(&db, 3).await, log_of(&db, 3).await);
        // The lower id was signed once, then moved on; the higher was never signed.
        let (low, high) = if x.workspace_id < y.workspace_id {
            (x, y)
        } else {
            (y, x)
        };
        let store = db.store.clone();
        let due = store.heads_to_sign(1000, 0).await.unwrap();
        let head = due
            .iter()
            .find(|(id, _)| *id == low.workspace_id)
            .map(|(_, h)| h.clone())
            .unwrap();
        let signed = sign_head(
            &signer(),
            low.workspace_id,
            head.seq,
            &head.hash.unwrap(),
            1_000,
        );
        assert!(store.insert_signed_head(&signed).await.unwrap());
        write_event(&db, &low, 4, Utc::now()).await;
        let order: Vec<Uuid> = store
            .heads_to_sign(1000, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let at = |id| order.iter().position(|o| *o == id).unwrap();
        assert!(
            at(high.workspace_id) < at(low.workspace_id),
            "{:?}: never signed first: {order:?}",
            db.backend
        );
    })
    .await;
}
