//! Token issuance in the store itself, beneath HTTP: the issuer's grants checked again inside
//! the insert's transaction, concurrent issuances for one user ending as if one after another,
//! and one issuance's failure staying its own when sent together with others.

use chrono::{DateTime, Utc};

use control_plane::storage::{InsertTokenError, NewToken, TokenFilter, TokenRecord, WriteContext};
use serde_json::json;
use uuid::Uuid;

use crate::support::{Tenant, sql_exec, sql_one, tenant_app};

/// A token for the tenant's user on its workspace, for the store-level tests below, valid
/// for a day from `now`.
fn tenant_token(
    tenant: &Tenant,
    public_id: String,
    name: &str,
    issuer: Option<Uuid>,
    now: DateTime<Utc>,
) -> NewToken {
    NewToken {
        record: TokenRecord {
            id: Uuid::new_v4(),
            public_id,
            user_id: tenant.user_id,
            organisation_id: tenant.organisation_id,
            name: name.to_owned(),
            scopes: vec!["activity:read".into()],
            workspace_ids: vec![tenant.workspace_id],
            environment_ids: vec![],
            created_at: now,
            expires_at: now + chrono::Duration::days(1),
            revoked_at: None,
            issued_by_token_id: issuer,
        },
        secret_hash: vec![0; 32],
    }
}

/// The issuer's grants are checked again inside the insert's transaction, so a revocation racing
/// an issuance cannot be escaped: on every backend the store refuses an issuer whose grant on a
/// requested workspace is gone, writes nothing, and accepts the same issuance once it is back.
#[tokio::test]
async fn the_store_refuses_an_issuer_that_lost_a_requested_workspace() {
    let (app, tenant) = tenant_app().await;
    let store = app.services.store();
    let filter = TokenFilter {
        user_id: Some(tenant.user_id),
        ..TokenFilter::default()
    };
    let issuer = store.list_tokens(&filter).await.unwrap().remove(0);
    let mut db = app.db().await;
    let revoke = "UPDATE token_workspaces SET revoked_at = $1 WHERE token_id = $2";
    sql_exec!(&mut db, revoke, Some(Utc::now()), issuer.id).unwrap();

    let now = Utc::now();
    let token = tenant_token(
        &tenant,
        format!("race{}", Uuid::new_v4().simple()),
        "issued-while-revoked",
        Some(issuer.id),
        now,
    );
    let refused = store
        .insert_token(&WriteContext::system(), &token, &[], 100, now)
        .await;
    assert!(
        matches!(refused, Err(InsertTokenError::IssuerLostAccess)),
        "{refused:?}"
    );
    let count = "SELECT count(*) FROM tokens WHERE name = 'issued-while-revoked'";
    assert_eq!(sql_one!(&mut db, (i64,), count).unwrap().0, 0);

    sql_exec!(&mut db, revoke, None::<DateTime<Utc>>, issuer.id).unwrap();
    store
        .insert_token(&WriteContext::system(), &token, &[], 100, now)
        .await
        .unwrap();
    assert_eq!(sql_one!(&mut db, (i64,), count).unwrap().0, 1);
}

/// Concurrent issuances for one user end as they would one after another, whatever gathers
/// them (Postgres batches the ones that wait together, SQLite runs them in turn): each name is
/// taken once, the cap holds exactly, and every issued token has its event and nothing else.
#[tokio::test]
async fn concurrent_issuances_share_names_and_the_cap_as_if_one_after_another() {
    use control_plane::domain::{Actor, NewAuditEvent};

    let (app, tenant) = tenant_app().await; // the bootstrap token is the user's first active token
    let store = app.services.store();
    let filter = TokenFilter {
        user_id: Some(tenant.user_id),
        ..TokenFilter::default()
    };
    let issuer = store.list_tokens(&filter).await.unwrap().remove(0);
    let now = Utc::now();
    // 24 issuances under 12 names, each name twice; half issued by the bootstrap token (the
    // issuer check runs), half by cpctl. The cap leaves room for 8 more.
    let tokens: Vec<NewToken> = (0..24)
        .map(|n| {
            tenant_token(
                &tenant,
                format!("conc{}", Uuid::new_v4().simple()),
                &format!("concurrent-{}", n % 12),
                (n % 2 == 0).then_some(issuer.id),
                now,
            )
        })
        .collect();
    let events: Vec<Vec<NewAuditEvent>> = tokens
        .iter()
        .map(|t| {
            vec![NewAuditEvent {
                organisation_id: tenant.organisation_id,
                workspace_id: Some(tenant.workspace_id),
                event_type: "token.issued",
                actor: Actor::admin(),
                target_kind: "token",
                target_id: t.record.id,
                correlation_id: "concurrent".into(),
                occurred_at: now,
                data: json!({ "tokenId": t.record.id }),
            }]
        })
        .collect();
    let write = WriteContext::system();
    let outcomes = futures_util::future::join_all(
        tokens
            .iter()
            .zip(&events)
            .map(|(t, e)| store.insert_token(&write, t, e, 9, now)),
    )
    .await;

    let issued: Vec<&NewToken> = tokens
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| o.is_ok())
        .map(|(t, _)| t)
        .collect();
    assert_eq!(issued.len(), 8, "{outcomes:?}");
    let names: std::collections::HashSet<&str> =
        issued.iter().map(|t| t.record.name.as_str()).collect();
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
    let mut db = app.db().await;
    let (active, events_written): (i64, i64) = sql_one!(
        &mut db,
        (i64, i64),
        "SELECT (SELECT count(*) FROM tokens WHERE user_id = $1 AND revoked_at IS NULL),
                (SELECT count(*) FROM audit_events WHERE correlation_id = 'concurrent')",
        tenant.user_id
    )
    .unwrap();
    assert_eq!((active, events_written), (9, 8));
    // Every issued token holds exactly its one grant.
    let grants: (i64,) = sql_one!(
        &mut db,
        (i64,),
        "SELECT count(*) FROM token_workspaces tw JOIN tokens t ON t.id = tw.token_id
         WHERE t.name LIKE 'concurrent-%'"
    )
    .unwrap();
    assert_eq!(grants.0, 8);
}

/// One issuance's failure stays its own: two issuances that collide on a unique column (the
/// public id) and a third that does not, sent together. Whether they shared a transaction
/// (Postgres retries a failed batch one issuance at a time) or not, exactly one of the pair
/// and the third are issued.
#[tokio::test]
async fn a_colliding_issuance_fails_alone_when_sent_together_with_others() {
    let (app, tenant) = tenant_app().await;
    let store = app.services.store();
    let now = Utc::now();
    let token =
        |public_id: &str, name: &str| tenant_token(&tenant, public_id.to_owned(), name, None, now);
    let collide = format!("coll{}", Uuid::new_v4().simple());
    let tokens = [
        token(&collide, "collides-a"),
        token(&collide, "collides-b"),
        token(&format!("free{}", Uuid::new_v4().simple()), "stands-alone"),
    ];
    let write = WriteContext::system();
    let outcomes = futures_util::future::join_all(
        tokens
            .iter()
            .map(|t| store.insert_token(&write, t, &[], 100, now)),
    )
    .await;
    let pair_issued = outcomes[..2].iter().filter(|o| o.is_ok()).count();
    assert_eq!(pair_issued, 1, "{outcomes:?}");
    assert!(outcomes[2].is_ok(), "{outcomes:?}");
    let mut db = app.db().await;
    let names =
        "SELECT count(*) FROM tokens WHERE name IN ('collides-a', 'collides-b', 'stands-alone')";
    assert_eq!(sql_one!(&mut db, (i64,), names).unwrap().0, 2);
}
