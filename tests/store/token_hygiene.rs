//! Token hygiene in the store: a last use never overwritten by an older one, and expiry
//! notices claimed once, for live tokens in the window only.

use chrono::{Duration, Utc};
use control_plane::domain::{Actor, NewAuditEvent};
use control_plane::storage::{
    ExpiringTokens, LastUseWrite, TokenFilter, TokenRecord, TokenUse, WriteContext,
};
use serde_json::json;

use crate::support::{each_backend, tenant, test_name, token};

fn used(token_id: uuid::Uuid, at: chrono::DateTime<Utc>, address: &str) -> LastUseWrite {
    LastUseWrite {
        token_id,
        used: TokenUse {
            at,
            address: address.to_owned(),
            user_agent: Some("agent".into()),
        },
    }
}

/// Micro-second times, as the service writes them.
fn now() -> chrono::DateTime<Utc> {
    let now = Utc::now();
    chrono::DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap()
}

#[tokio::test]
async fn a_last_use_is_recorded_and_an_older_one_does_not_replace_it() {
    each_backend(test_name!(), |db| async move {
        let store = &db.store;
        let tenant = tenant(store.as_ref()).await;
        let write = WriteContext::system();
        let now = now();
        let t = token(&tenant, "used", None, now);
        store.insert_token(&write, &t, &[], 100, now).await.unwrap();
        let id = t.record.id;
        let later = used(id, now + Duration::seconds(61), "192.0.2.2");
        assert_eq!(
            store
                .record_last_uses(&write, std::slice::from_ref(&later))
                .await
                .unwrap(),
            1
        );
        let older = used(id, now, "192.0.2.1");
        assert_eq!(
            store.record_last_uses(&write, &[older]).await.unwrap(),
            0,
            "{:?}: an older use changes nothing",
            db.backend
        );
        let filter = TokenFilter {
            token_id: Some(id),
            ..TokenFilter::default()
        };
        let record = store.list_tokens(&filter).await.unwrap().remove(0);
        assert_eq!(record.last_use, Some(later.used), "{:?}", db.backend);
    })
    .await;
}

#[tokio::test]
async fn expiry_notices_are_claimed_once_for_live_tokens_in_the_window() {
    each_backend(test_name!(), |db| async move {
        let store = &db.store;
        let tenant = tenant(store.as_ref()).await;
        let write = WriteContext::system();
        let now = now();
        // `token` expires a day after `now`.
        let soon = token(&tenant, "soon", None, now);
        let far = token(&tenant, "far", None, now + Duration::days(30));
        let revoked = token(&tenant, "revoked", None, now);
        for t in [&soon, &far, &revoked] {
            store.insert_token(&write, t, &[], 100, now).await.unwrap();
        }
        db.exec("UPDATE tokens SET revoked_at = expires_at WHERE name = 'revoked'")
            .await;
        let events = |t: &TokenRecord| -> Vec<NewAuditEvent> {
            t.workspace_ids
                .iter()
                .map(|ws| NewAuditEvent {
                    organisation_id: t.organisation_id,
                    workspace_id: Some(*ws),
                    event_type: "token.expiring",
                    actor: Actor::system(),
                    target_kind: "token",
                    target_id: t.id,
                    correlation_id: "store-test".into(),
                    occurred_at: Utc::now(),
                    data: json!({ "tokenId": t.id }),
                })
                .collect()
        };
        let due = ExpiringTokens {
            now,
            until: now + Duration::days(7),
            limit: 100,
        };
        let (a, b) = tokio::join!(
            store.notice_expiring_tokens(&write, due, &events),
            store.notice_expiring_tokens(&write, due, &events)
        );
        assert_eq!(
            a.unwrap() + b.unwrap(),
            1,
            "{:?}: only `soon`, once",
            db.backend
        );
        let count = "SELECT count(*) FROM audit_events WHERE event_type = 'token.expiring'";
        assert_eq!(db.count(count).await, 1, "{:?}", db.backend);
        let noticed = "SELECT count(*) FROM tokens WHERE expiry_notice_at IS NOT NULL";
        assert_eq!(db.count(noticed).await, 1, "{:?}", db.backend);
        let again = store.notice_expiring_tokens(&write, due, &events).await;
        assert_eq!(again.unwrap(), 0, "{:?}", db.backend);
    })
    .await;
}

/// `TokenFilter`'s time filters, in SQL on both backends: live tokens only, expiring by a
/// time, unused since a time (never used counting from issuance).
#[tokio::test]
async fn list_filters_select_by_expiry_and_last_use() {
    each_backend(test_name!(), |db| async move {
        let store = &db.store;
        let tenant = tenant(store.as_ref()).await;
        let write = WriteContext::system();
        let now = now();
        let month_ago = now - Duration::days(31);
        // Issued a month ago (expiring in 1 day from then: expired), or now (expiring in a day).
        let expired = token(&tenant, "expired", None, month_ago);
        let idle = token(&tenant, "idle", None, now);
        let busy = token(&tenant, "busy", None, now);
        let fresh = token(&tenant, "fresh", None, now);
        for t in [&expired, &idle, &busy, &fresh] {
            store.insert_token(&write, t, &[], 100, now).await.unwrap();
        }
        // idle: issued a month ago and never used; busy: issued a month ago, used just now.
        db.exec(
            "UPDATE tokens SET created_at = (SELECT created_at FROM tokens WHERE name = 'expired')
             WHERE name IN ('idle', 'busy')",
        )
        .await;
        store
            .record_last_uses(&write, &[used(busy.record.id, now, "192.0.2.3")])
            .await
            .unwrap();
        let names = |filter: TokenFilter| async move {
            let mut names: Vec<String> = store
                .list_tokens(&filter)
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.name)
                .collect();
            names.sort();
            names
        };
        let unused = TokenFilter {
            live_at: Some(now),
            unused_since: Some(now - Duration::days(30)),
            ..TokenFilter::default()
        };
        assert_eq!(names(unused).await, ["idle"], "{:?}", db.backend);
        let expiring = TokenFilter {
            live_at: Some(now),
            expires_by: Some(now + Duration::days(2)),
            ..TokenFilter::default()
        };
        assert_eq!(
            names(expiring).await,
            ["busy", "fresh", "idle"],
            "{:?}: live ones only",
            db.backend
        );
        let narrow = TokenFilter {
            live_at: Some(now),
            expires_by: Some(now + Duration::hours(1)),
            ..TokenFilter::default()
        };
        assert!(names(narrow).await.is_empty(), "{:?}", db.backend);
    })
    .await;
}
