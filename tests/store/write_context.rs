//! What a `WriteContext` decides about a write's transaction, on each backend: an immediate
//! context commits at once; a held one (a keyed request's) parks the transaction until the
//! idempotency layer commits it with its outcome, or drops it; a second write in one held
//! context commits the first without its outcome rather than waiting on its own locks; and an
//! outcome already under the place rolls the change back.

use std::sync::Arc;

use chrono::Utc;
use control_plane::domain::{Actor, CorrelationId};
use control_plane::storage::{OutcomeSlot, StoreError, WriteContext};

use crate::support::{TestStore, each_backend, issued, now_ms, outcome, tenant, test_name, token};

fn held(slot: &Arc<OutcomeSlot>) -> WriteContext {
    WriteContext::held(CorrelationId::generate(), Actor::admin(), slot.clone())
}

async fn tokens_named(db: &TestStore, name: &str) -> i64 {
    db.count(&format!(
        "SELECT count(*) FROM tokens WHERE name = '{name}'"
    ))
    .await
}

#[tokio::test]
async fn an_immediate_write_is_committed_when_the_port_returns() {
    each_backend(test_name!(), |db| async move {
        let tenant = tenant(db.store.as_ref()).await;
        let now = Utc::now();
        let t = token(&tenant, "immediate", None, now);
        let write = WriteContext::system();
        db.store
            .insert_token(&write, &t, &[issued(&t)], 100, now)
            .await
            .unwrap();
        assert_eq!(tokens_named(&db, "immediate").await, 1, "{:?}", db.backend);
        assert!(!write.holds());
    })
    .await;
}

#[tokio::test]
async fn a_held_write_is_seen_only_once_committed_with_its_outcome() {
    each_backend(test_name!(), |db| async move {
        let tenant = tenant(db.store.as_ref()).await;
        let now = Utc::now();
        let t = token(&tenant, "held", None, now);
        let slot = Arc::new(OutcomeSlot::default());
        db.store
            .insert_token(&held(&slot), &t, &[issued(&t)], 100, now)
            .await
            .unwrap();
        // Parked, not committed (and never sent to the Postgres batcher, which would commit it).
        assert_eq!(tokens_named(&db, "held").await, 0, "{:?}", db.backend);
        let events = "SELECT count(*) FROM audit_events WHERE event_type = 'token.issued'";
        assert_eq!(db.count(events).await, 0);

        let record = outcome();
        let change = slot.take().expect("the adapter parked its transaction");
        change.commit(Some(&record), now_ms()).await.unwrap();
        assert_eq!(tokens_named(&db, "held").await, 1);
        assert_eq!(db.count(events).await, 1);
        let stored = db
            .store
            .find_outcome(&record.place, now_ms())
            .await
            .unwrap();
        assert_eq!(stored.map(|s| s.sealed), Some(record.sealed));
    })
    .await;
}

#[tokio::test]
async fn a_held_write_that_is_dropped_rolls_back_and_frees_the_writer() {
    each_backend(test_name!(), |db| async move {
        let tenant = tenant(db.store.as_ref()).await;
        let now = Utc::now();
        let t = token(&tenant, "dropped", None, now);
        let slot = Arc::new(OutcomeSlot::default());
        db.store
            .insert_token(&held(&slot), &t, &[], 100, now)
            .await
            .unwrap();
        drop(slot.take().expect("parked"));
        assert_eq!(tokens_named(&db, "dropped").await, 0, "{:?}", db.backend);
        // The dropped transaction's locks (SQLite: the writer's turn) are gone: a write goes on.
        let next = token(&tenant, "after-drop", None, now);
        db.store
            .insert_token(&WriteContext::system(), &next, &[], 100, now)
            .await
            .unwrap();
        assert_eq!(tokens_named(&db, "after-drop").await, 1);
    })
    .await;
}

#[tokio::test]
async fn a_second_write_in_one_held_context_commits_the_first_without_its_outcome() {
    each_backend(test_name!(), |db| async move {
        let tenant = tenant(db.store.as_ref()).await;
        let now = Utc::now();
        let (first, second) = (
            token(&tenant, "first", None, now),
            token(&tenant, "second", None, now),
        );
        let slot = Arc::new(OutcomeSlot::default());
        let write = held(&slot);
        db.store
            .insert_token(&write, &first, &[], 100, now)
            .await
            .unwrap();
        // Would wait on the first's locks (SQLite: its own writer turn) if it were still open.
        db.store
            .insert_token(&write, &second, &[], 100, now)
            .await
            .unwrap();
        assert_eq!(tokens_named(&db, "first").await, 1, "{:?}", db.backend);
        assert_eq!(tokens_named(&db, "second").await, 0);

        let record = outcome();
        slot.take()
            .expect("the second is parked")
            .commit(Some(&record), now_ms())
            .await
            .unwrap();
        assert_eq!(tokens_named(&db, "second").await, 1);
        assert!(
            db.store
                .find_outcome(&record.place, now_ms())
                .await
                .unwrap()
                .is_some()
        );
    })
    .await;
}

#[tokio::test]
async fn an_outcome_already_under_the_place_rolls_the_held_change_back() {
    each_backend(test_name!(), |db| async move {
        let tenant = tenant(db.store.as_ref()).await;
        let now = Utc::now();
        let record = outcome();
        db.store.put_outcome(&record, now_ms()).await.unwrap();

        let t = token(&tenant, "second-run", None, now);
        let slot = Arc::new(OutcomeSlot::default());
        db.store
            .insert_token(&held(&slot), &t, &[issued(&t)], 100, now)
            .await
            .unwrap();
        let committed = slot
            .take()
            .expect("parked")
            .commit(Some(&record), now_ms())
            .await;
        assert!(
            matches!(committed, Err(StoreError::Conflict(_))),
            "{:?}: {committed:?}",
            db.backend
        );
        assert_eq!(tokens_named(&db, "second-run").await, 0);
    })
    .await;
}
