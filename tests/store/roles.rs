//! A user's role in the store: changed only from the role it has (so of two concurrent changes
//! one wins), with its event, and read back with the user and with every credential of it.

use chrono::Utc;
use control_plane::domain::{Actor, NewAuditEvent, Role};
use control_plane::storage::WriteContext;
use serde_json::json;

use crate::support::{each_backend, tenant, test_name, token};

fn changed(tenant: &crate::support::Tenant) -> NewAuditEvent {
    NewAuditEvent {
        organisation_id: tenant.organisation_id,
        workspace_id: None,
        event_type: "user.role_changed",
        actor: Actor::admin(),
        target_kind: "user",
        target_id: tenant.user_id,
        correlation_id: "store-test".into(),
        occurred_at: Utc::now(),
        data: json!({}),
    }
}

#[tokio::test]
async fn a_role_changes_only_from_the_role_it_has() {
    each_backend(test_name!(), |db| async move {
        let store = &db.store;
        let tenant = tenant(store.as_ref()).await;
        let write = WriteContext::system();
        let event = changed(&tenant);
        let user = tenant.user_id;
        let set = |from, to| store.set_user_role(&write, user, from, to, &event);
        assert!(
            set(Role::Member, Role::Admin).await.unwrap(),
            "{:?}",
            db.backend
        );
        // A second change from the old role lost the race: nothing written.
        assert!(
            !set(Role::Member, Role::Operator).await.unwrap(),
            "{:?}",
            db.backend
        );
        assert!(
            !set(Role::Admin, Role::Admin).await.unwrap(),
            "{:?}",
            db.backend
        );
        let read = store.get_user(user).await.unwrap().expect("the user");
        assert_eq!(read.role, Role::Admin, "{:?}", db.backend);

        let now = Utc::now();
        let t = token(&tenant, "role", None, now);
        store.insert_token(&write, &t, &[], 100, now).await.unwrap();
        let stored = store
            .find_credential(&t.record.public_id)
            .await
            .unwrap()
            .expect("the credential");
        assert_eq!(stored.user_role, Role::Admin, "{:?}", db.backend);
    })
    .await;
}
