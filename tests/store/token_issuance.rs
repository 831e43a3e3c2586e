//! Token issuance in the store: the issuer's grants checked again inside the insert's
//! transaction, concurrent issuances for one user ending as if one after another, and one
//! issuance's failure staying its own when sent together with others.

use std::collections::HashSet;

use chrono::Utc;
use control_plane::storage::{InsertTokenError, NewToken, WriteContext};

use crate::support::{Backend, each_backend, issued, tenant, test_name, token};

/// The issuer's grants are checked again inside the insert's transaction, so a revocation racing
/// an issuance cannot be escaped: the store refuses an issuer whose grant on a requested
/// workspace is gone, writes nothing, and accepts the same issuance once it is back.
#[tokio::test]
async fn the_store_refuses_an_issuer_that_lost_a_requested_workspace() {
    each_backend(test_name!(), |db| async move {
        let store = &db.store;
        let tenant = tenant(store.as_ref()).await;
        let write = WriteContext::system();
        let now = Utc::now();
        let issuer = token(&tenant, "issuer", None, now);
        store
            .insert_token(&write, &issuer, &[], 100, now)
            .await
            .unwrap();
        db.exec(match db.backend {
            Backend::Postgres => "UPDATE token_workspaces SET revoked_at = now()",
            Backend::Sqlite => {
                "UPDATE token_workspaces SET revoked_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
            }
        })
        .await;

        let child = token(&tenant, "issued-while-revoked", Some(issuer.record.id), now);
        let refused = store.insert_token(&write, &child, &[], 100, now).await;
        assert!(
            matches!(refused, Err(InsertTokenError::IssuerLostAccess)),
            "{:?}: {refused:?}",
            db.backend
        );
        let count = "SELECT count(*) FROM tokens WHERE name = 'issued-while-revoked'";
        assert_eq!(db.count(count).await, 0);

        db.exec("UPDATE token_workspaces SET revoked_at = NULL")
            .await;
        store
            .insert_token(&write, &child, &[], 100, now)
            .await
            .unwrap();
        assert_eq!(db.count(count).await, 1);
    })
    .await;
}

/// Concurrent issuances for one user end as they would one after another, whatever gathers
/// them (Postgres batches the ones that wait together, SQLite runs them in turn): each name is
/// taken once, the cap holds exactly, and every issued token has its event and nothing else.
#[tokio::test]
async fn concurrent_issuances_share_names_and_the_cap_as_if_one_after_another() {
    each_backend(test_name!(), |db| async move {
        let store = &db.store;
        let tenant = tenant(store.as_ref()).await;
        let write = WriteContext::system();
        let now = Utc::now();
        let issuer = token(&tenant, "issuer", None, now);
        store
            .insert_token(&write, &issuer, &[], 100, now)
            .await
            .unwrap();
        // 24 issuances under 12 names, each name twice; half issued by the first token (the
        // issuer check runs), half by cpctl. The cap (9) leaves room for 8 more.
        let tokens: Vec<NewToken> = (0..24)
            .map(|n| {
                let by = (n % 2 == 0).then_some(issuer.record.id);
                token(&tenant, &format!("concurrent-{}", n % 12), by, now)
            })
            .collect();
        let events: Vec<_> = tokens.iter().map(|t| vec![issued(t)]).collect();
        let outcomes = futures_util::future::join_all(
            tokens
                .iter()
                .zip(&events)
                .map(|(t, e)| store.insert_token(&write, t, e, 9, now)),
        )
        .await;

        let accepted: Vec<&NewToken> = tokens
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| o.is_ok())
            .map(|(t, _)| t)
            .collect();
        assert_eq!(accepted.len(), 8, "{:?}: {outcomes:?}", db.backend);
        let names: HashSet<&str> = accepted.iter().map(|t| t.record.name.as_str()).collect();
        assert_eq!(names.len(), 8, "a name was issued twice: {outcomes:?}");
        for outcome in &outcomes {
            assert!(
                matches!(
                    outcome,
                    Ok(()) | Err(InsertTokenError::NameTaken | InsertTokenError::LimitReached)
                ),
                "{outcome:?}"
            );
        }
        let active = "SELECT count(*) FROM tokens WHERE revoked_at IS NULL";
        assert_eq!(db.count(active).await, 9);
        let events = "SELECT count(*) FROM audit_events WHERE event_type = 'token.issued'";
        assert_eq!(db.count(events).await, 8);
        // Every issued token holds exactly its one grant.
        let grants = "SELECT count(*) FROM token_workspaces tw JOIN tokens t ON t.id = tw.token_id
                      WHERE t.name LIKE 'concurrent-%'";
        assert_eq!(db.count(grants).await, 8);
    })
    .await;
}

/// One issuance's failure stays its own: two issuances that collide on a unique column (the
/// public id) and a third that does not, sent together. Whether they shared a transaction
/// (Postgres retries a failed batch one issuance at a time) or not, exactly one of the pair
/// and the third are issued.
#[tokio::test]
async fn a_colliding_issuance_fails_alone_when_sent_together_with_others() {
    each_backend(test_name!(), |db| async move {
        let store = &db.store;
        let tenant = tenant(store.as_ref()).await;
        let now = Utc::now();
        let mut a = token(&tenant, "collides-a", None, now);
        let mut b = token(&tenant, "collides-b", None, now);
        let alone = token(&tenant, "stands-alone", None, now);
        b.record.public_id = a.record.public_id.clone();
        a.record.public_id = b.record.public_id.clone();
        let write = WriteContext::system();
        let tokens = [a, b, alone];
        let outcomes = futures_util::future::join_all(
            tokens
                .iter()
                .map(|t| store.insert_token(&write, t, &[], 100, now)),
        )
        .await;
        let pair_issued = outcomes[..2].iter().filter(|o| o.is_ok()).count();
        assert_eq!(pair_issued, 1, "{:?}: {outcomes:?}", db.backend);
        assert!(outcomes[2].is_ok(), "{outcomes:?}");
        let names = "SELECT count(*) FROM tokens
                     WHERE name IN ('collides-a', 'collides-b', 'stands-alone')";
        assert_eq!(db.count(names).await, 2);
    })
    .await;
}
