//! A user's self-service of its own tokens under `/v1/me/tokens`: any live token of a member,
//! whatever its scopes, lists exactly its user's tokens and revokes one of them (itself
//! included); another user's token is the same 404 as one that does not exist. A keyed
//! revocation runs once and its repeat replays, and the audit event names the member's user
//! and the token that acted.

use control_plane::domain::{Role, Scope};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    Call, RoleHolder, Tenant, TestApp, error_shape, event_actor, events_about, routes, tenant_app,
};

/// Issues another token for `user` through the admin route as the tenant's operator,
/// returning (token id, secret).
async fn issue_for(app: &TestApp, tenant: &Tenant, user: Uuid) -> (Uuid, String) {
    let body = json!({
        "name": format!("t-{}", Uuid::new_v4().simple()),
        "scopes": ["activity:read"],
        "workspaceIds": [tenant.workspace_id],
    });
    let issued: Value = app
        .post_ok(
            &routes::user_tokens(tenant.organisation_id, user),
            &tenant.token,
            &body,
        )
        .await;
    let credential = &issued["credential"];
    (
        serde_json::from_value(credential["id"].clone()).unwrap(),
        credential["token"].as_str().unwrap().to_owned(),
    )
}

/// A member of the tenant's organisation whose one token holds no scope at all.
async fn scopeless_member(app: &TestApp, tenant: &Tenant) -> RoleHolder {
    app.user_in_role(tenant, Role::Member, &[]).await
}

fn ids(page: &Value, field: &str) -> Vec<Uuid> {
    page["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a page: {page}"))
        .iter()
        .map(|t| serde_json::from_value(t[field].clone()).unwrap())
        .collect()
}

#[tokio::test]
async fn a_member_lists_exactly_its_own_tokens() {
    let (app, tenant) = tenant_app().await;
    let member = scopeless_member(&app, &tenant).await;
    let mut own = vec![member.token_id];
    for _ in 0..2 {
        own.push(issue_for(&app, &tenant, member.user_id).await.0);
    }
    // Another member's tokens, and the operator's, are in the organisation but not the list.
    let other = app
        .user_in_role(&tenant, Role::Member, &[Scope::ActivityRead])
        .await;
    issue_for(&app, &tenant, other.user_id).await;

    let page: Value = app.get_ok(routes::OWN_TOKENS, &member.token).await;
    assert_eq!(ids(&page, "id"), own, "{page}");
    assert!(ids(&page, "userId").iter().all(|u| *u == member.user_id));
    assert_eq!(page["nextCursor"], Value::Null);
    // Never a secret.
    assert!(!page.to_string().contains(&member.token), "{page}");
    let theirs: Value = app.get_ok(routes::OWN_TOKENS, &other.token).await;
    assert_eq!(ids(&theirs, "userId").len(), 2);
    assert!(ids(&theirs, "userId").iter().all(|u| *u == other.user_id));

    // Paged by cursor, in the order they were issued.
    let mut seen = vec![];
    let mut path = format!("{}?limit=2", routes::OWN_TOKENS);
    loop {
        let page: Value = app.get_ok(&path, &member.token).await;
        assert!(page["items"].as_array().unwrap().len() <= 2);
        seen.extend(ids(&page, "id"));
        match page["nextCursor"].as_str() {
            Some(cursor) => path = format!("{}?limit=2&cursor={cursor}", routes::OWN_TOKENS),
            None => break,
        }
    }
    assert_eq!(seen, own);

    // The time filters of the organisation's list.
    for (query, expected) in [
        (format!("expiringWithinSeconds={}", 31 * 86_400), 3),
        ("expiringWithinSeconds=60".to_owned(), 0),
        ("unusedForSeconds=86400".to_owned(), 0),
    ] {
        let path = format!("{}?{query}", routes::OWN_TOKENS);
        let page: Value = app.get_ok(&path, &member.token).await;
        assert_eq!(page["items"].as_array().unwrap().len(), expected, "{query}");
    }
    for query in ["cursor=not-a-cursor", "limit=0", "unusedForSeconds=-1"] {
        app.get(&format!("{}?{query}", routes::OWN_TOKENS), &member.token)
            .expect(400, "validation_failed")
            .await;
    }
    app.get(routes::OWN_TOKENS, "cpat_not_a_real_token")
        .expect(401, "unauthenticated")
        .await;
}

#[tokio::test]
async fn a_member_revokes_its_own_tokens_and_no_one_elses() {
    let (app, tenant) = tenant_app().await;
    let member = scopeless_member(&app, &tenant).await;
    let (spare, spare_secret) = issue_for(&app, &tenant, member.user_id).await;
    let other = app
        .user_in_role(&tenant, Role::Member, &[Scope::ActivityRead])
        .await;
    let reason = json!({ "reason": "no longer needed" });

    // Another user's token is not found, exactly like one that does not exist, and is untouched.
    let unknown = error_shape(
        app.post_json(
            &routes::revoke_own_token(Uuid::new_v4()),
            &member.token,
            &reason,
        )
        .response()
        .await,
    )
    .await;
    assert_eq!(unknown["status"], 404, "{unknown}");
    assert_eq!(unknown["code"], "not_found", "{unknown}");
    for token in [other.token_id.to_string(), "not-a-token".to_owned()] {
        let refused = app.post_json(&routes::revoke_own_token(&token), &member.token, &reason);
        assert_eq!(error_shape(refused.response().await).await, unknown);
    }
    app.post_json(
        &routes::revoke_own_token(other.token_id),
        &member.token,
        &reason,
    )
    .expect(404, "not_found")
    .await;
    app.get(routes::ME, &other.token).ok_response().await;
    assert_eq!(
        events_about(&app, "token.workspace_access_revoked", other.token_id)
            .await
            .0,
        0
    );
    // The body is an administrator's revocation's: the reason is required.
    app.post_json(&routes::revoke_own_token(spare), &member.token, &json!({}))
        .expect(400, "validation_failed")
        .await;

    // A keyed revocation of another of its own tokens runs once; its repeat replays.
    let key = format!("k-{}", Uuid::new_v4().simple());
    let send = || {
        app.post_json(&routes::revoke_own_token(spare), &member.token, &reason)
            .header("idempotency-key", key.clone())
    };
    let first = send().ok_response().await;
    assert!(first.headers().get("idempotency-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    assert_eq!(
        first,
        json!({ "tokenRevoked": true, "descendantsRevoked": 0 })
    );
    let again = send().ok_response().await;
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    assert_eq!(
        events_about(&app, "token.workspace_access_revoked", spare)
            .await
            .0,
        1
    );
    // The event names the member's user and the token that revoked.
    assert_eq!(
        event_actor(&app, "token.workspace_access_revoked", spare).await,
        (
            "user".to_owned(),
            Some(member.user_id),
            Some(member.token_id)
        )
    );
    app.get(routes::ME, &spare_secret)
        .expect(401, "unauthenticated")
        .await;
    // Revoked already: nothing left to revoke (without the key, a fresh request).
    app.post_json(&routes::revoke_own_token(spare), &member.token, &reason)
        .expect(404, "not_found")
        .await;

    // The list shows the revocation.
    let page: Value = app.get_ok(routes::OWN_TOKENS, &member.token).await;
    let revoked: Vec<&Value> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| !t["revokedAt"].is_null())
        .collect();
    assert_eq!(revoked.len(), 1, "{page}");
    assert_eq!(revoked[0]["id"], json!(spare));
}

#[tokio::test]
async fn a_token_revokes_itself() {
    let (app, tenant) = tenant_app().await;
    let member = scopeless_member(&app, &tenant).await;
    let key = format!("k-{}", Uuid::new_v4().simple());
    let send = || {
        app.post_json(
            &routes::revoke_own_token(member.token_id),
            &member.token,
            &json!({ "reason": "leaving" }),
        )
        .header("idempotency-key", key.clone())
    };
    let revoked: Value = send().ok().await;
    assert_eq!(revoked["tokenRevoked"], true);
    app.get(routes::ME, &member.token)
        .expect(401, "unauthenticated")
        .await;
    assert_eq!(
        event_actor(&app, "token.workspace_access_revoked", member.token_id).await,
        (
            "user".to_owned(),
            Some(member.user_id),
            Some(member.token_id)
        )
    );
    // Its stored answer goes to no one: the token that could replay it is revoked.
    send().expect(401, "unauthenticated").await;
}
