//! Token lineage (issue 12): a token issued by a token records its issuer, never outlives it,
//! and can be revoked with its descendants; a token limited to some environments revokes only
//! tokens within them; another organisation's ids answer exactly like ids that do not exist.

use chrono::{DateTime, Duration, Utc};
use control_plane::domain::{
    CorrelationId, ExpiresInDays, RevocationReason, Scope, Scopes, TokenName,
};
use control_plane::service::IssueTokenInput;
use control_plane::storage::{TokenFilter, TokenRecord};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::revoke_token::{activity_status, revoke_path};
use crate::support::{Call, Tenant, TestApp, issuance_body, routes, sql_all, tenant_app};

/// A token issued through the admin path, with its record.
async fn admin_issue(
    app: &TestApp,
    tenant: &Tenant,
    scopes: &[Scope],
    environments: &[Uuid],
    days: i64,
) -> (TokenRecord, String) {
    let input = IssueTokenInput::new(
        TokenName::parse(&format!("t-{}", Uuid::new_v4().simple())).unwrap(),
        scopes.iter().copied().collect::<Scopes>(),
        tenant.organisation_id,
        vec![tenant.workspace_id],
        environments.to_vec(),
        ExpiresInDays::parse(days).unwrap(),
    )
    .unwrap();
    let issued = app
        .services
        .issue_token_for_user(tenant.user_id, input, &CorrelationId::generate())
        .await
        .unwrap();
    (issued.record, issued.secret.expose().to_owned())
}

/// Issues a child over HTTP with `scopes`; returns (id, secret, the credential).
async fn child_of(
    app: &TestApp,
    tenant: &Tenant,
    parent: &str,
    scopes: &[&str],
) -> (Uuid, String, Value) {
    let mut body = issuance_body(tenant);
    body["scopes"] = json!(scopes);
    let response = app.issue(parent, &body).await;
    assert_eq!(response.status(), 200);
    let credential = response.json::<Value>().await.unwrap()["credential"].clone();
    let id = credential["id"].as_str().unwrap().parse().unwrap();
    let secret = credential["token"].as_str().unwrap().to_owned();
    (id, secret, credential)
}

async fn record(app: &TestApp, id: Uuid) -> TokenRecord {
    let filter = TokenFilter {
        token_id: Some(id),
        ..TokenFilter::default()
    };
    app.services.list_tokens(&filter).await.unwrap().remove(0)
}

fn at(value: &Value) -> DateTime<Utc> {
    value.as_str().unwrap().parse().unwrap()
}

const ISSUER: &[Scope] = &[Scope::TokensIssue, Scope::TokensRevoke, Scope::ActivityRead];
const CHILD: &[&str] = &["tokens:issue", "activity:read"];

#[tokio::test]
async fn a_child_never_outlives_its_issuer_and_records_it() {
    let (app, tenant) = tenant_app().await;

    // A parent with 5 days left: a default (30-day) request succeeds with the parent's expiry.
    let (short, short_secret) = admin_issue(&app, &tenant, ISSUER, &[], 5).await;
    assert_eq!(
        short.issued_by_token_id, None,
        "cpctl-issued tokens have no issuer"
    );
    let (child, _, credential) = child_of(&app, &tenant, &short_secret, CHILD).await;
    assert_eq!(at(&credential["expiresAt"]), short.expires_at);
    let stored = record(&app, child).await;
    assert_eq!(stored.expires_at, short.expires_at);
    assert_eq!(stored.issued_by_token_id, Some(short.id));

    // A parent with 90 days: the child gets its own 30 days.
    let (long, long_secret) = admin_issue(&app, &tenant, ISSUER, &[], 90).await;
    let (_, _, credential) = child_of(&app, &tenant, &long_secret, CHILD).await;
    assert_eq!(
        at(&credential["expiresAt"]) - at(&credential["createdAt"]),
        Duration::days(30)
    );
    assert!(at(&credential["expiresAt"]) < long.expires_at);

    // The token.issued event names the issuer; cpctl's issuance names none.
    let mut db = app.db().await;
    let rows: Vec<(String,)> = sql_all!(
        &mut db,
        (String,),
        "SELECT CAST(data AS TEXT) FROM audit_events WHERE event_type = 'token.issued' AND target_id = $1",
        child
    )
    .unwrap();
    assert_eq!(rows.len(), 1);
    let data: Value = serde_json::from_str(&rows[0].0).unwrap();
    assert_eq!(data["issuedByTokenId"], json!(short.id));
    let rows: Vec<(String,)> = sql_all!(
        &mut db,
        (String,),
        "SELECT CAST(data AS TEXT) FROM audit_events WHERE event_type = 'token.issued' AND target_id = $1",
        short.id
    )
    .unwrap();
    let data: Value = serde_json::from_str(&rows[0].0).unwrap();
    assert_eq!(data["issuedByTokenId"], Value::Null);
}

#[tokio::test]
async fn a_cascading_revocation_takes_the_workspace_from_every_descendant_only() {
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let (root, root_secret) = admin_issue(&app, &tenant, ISSUER, &[], 30).await;
    let (child, child_secret) = {
        let (id, secret, _) = child_of(&app, &tenant, &root_secret, CHILD).await;
        (id, secret)
    };
    let (_, grandchild_secret, _) =
        child_of(&app, &tenant, &child_secret, &["activity:read"]).await;
    // Another lineage in the same workspace.
    let (_, other_secret) = admin_issue(&app, &tenant, ISSUER, &[], 30).await;
    let (_, sibling_secret, _) = child_of(&app, &tenant, &other_secret, CHILD).await;

    // Without `cascade` (default false) the children stay alive.
    let path = |token: Uuid| revoke_path(ws, token);
    let (_, plain_secret) = admin_issue(&app, &tenant, ISSUER, &[], 30).await;
    let plain = app
        .services
        .authenticate(&plain_secret)
        .await
        .unwrap()
        .token_id;
    let (_, plain_child, _) = child_of(&app, &tenant, &plain_secret, CHILD).await;
    app.delete_json(&path(plain), &tenant.token, &json!({"reason": "plain"}))
        .ok_response()
        .await;
    assert_eq!(activity_status(&app, &plain_secret, ws).await, 401);
    assert_eq!(activity_status(&app, &plain_child, ws).await, 200);

    let response = app
        .delete_json(
            &path(root.id),
            &tenant.token,
            &json!({"reason": "compromised", "cascade": true}),
        )
        .ok_response()
        .await;
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"revoked": true})
    );
    for secret in [&root_secret, &child_secret, &grandchild_secret] {
        assert_eq!(activity_status(&app, secret, ws).await, 401);
    }
    assert_eq!(activity_status(&app, &other_secret, ws).await, 200);
    assert_eq!(activity_status(&app, &sibling_secret, ws).await, 200);

    // One event per revoked grant; the descendants' name the root.
    let mut db = app.db().await;
    let rows: Vec<(String,)> = sql_all!(
        &mut db,
        (String,),
        "SELECT CAST(data AS TEXT) FROM audit_events
         WHERE event_type = 'token.workspace_access_revoked' AND workspace_id = $1
         ORDER BY seq",
        ws
    )
    .unwrap();
    let data: Vec<Value> = rows
        .iter()
        .map(|(d,)| serde_json::from_str(d).unwrap())
        .collect();
    let cascaded: Vec<&Value> = data
        .iter()
        .filter(|d| d["cascadedFrom"] == json!(root.id))
        .collect();
    assert_eq!(cascaded.len(), 2, "{data:?}");
    assert!(cascaded.iter().any(|d| d["tokenId"] == json!(child)));
    assert!(cascaded.iter().all(|d| d["tokenRevoked"] == json!(true)));

    // A descendant with another workspace loses only the revoked one.
    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let wide = app.admin_token(&tenant, ISSUER, &[ws, second], &[]).await;
    let wide_id = app.services.authenticate(&wide).await.unwrap().token_id;
    let mut body = issuance_body(&tenant);
    body["workspaceIds"] = json!([ws, second]);
    let response = app.issue(&wide, &body).await;
    let credential: Value = response.json().await.unwrap();
    let wide_child = credential["credential"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    app.delete_json(
        &path(wide_id),
        &tenant.token,
        &json!({"reason": "one workspace", "cascade": true}),
    )
    .ok_response()
    .await;
    assert_eq!(activity_status(&app, &wide_child, ws).await, 403);
    assert_eq!(activity_status(&app, &wide_child, second).await, 200);
}

#[tokio::test]
async fn the_admin_cascade_revokes_the_whole_token_and_its_descendants() {
    let (app, tenant) = tenant_app().await;
    let (root, root_secret) = admin_issue(&app, &tenant, ISSUER, &[], 30).await;
    let (child, child_secret, _) = child_of(&app, &tenant, &root_secret, CHILD).await;
    let (grandchild, _, _) = child_of(&app, &tenant, &child_secret, &["activity:read"]).await;
    let (other, _) = admin_issue(&app, &tenant, ISSUER, &[], 30).await;

    let outcome = app
        .services
        .revoke_token_access_as_admin(
            None,
            root.id,
            RevocationReason::parse("leaked").unwrap(),
            true,
            &CorrelationId::generate(),
        )
        .await
        .unwrap();
    assert!(outcome.token_revoked);
    assert_eq!(outcome.descendants_revoked, 2);
    for id in [root.id, child, grandchild] {
        let r = record(&app, id).await;
        assert!(r.revoked_at.is_some(), "{id} revoked");
        assert!(r.workspace_ids.is_empty());
    }
    assert!(record(&app, other.id).await.revoked_at.is_none());
}

#[tokio::test]
async fn a_caller_limited_to_environments_revokes_only_tokens_within_them() {
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let one = app.create_environment(ws, "one").await;
    let two = app.create_environment(ws, "two").await;
    let (_, limited) = admin_issue(&app, &tenant, &[Scope::TokensRevoke], &[one], 30).await;
    let (unlimited, _) = admin_issue(&app, &tenant, &[Scope::ActivityRead], &[], 30).await;
    let (wider, _) = admin_issue(&app, &tenant, &[Scope::ActivityRead], &[one, two], 30).await;
    let (within, _) = admin_issue(&app, &tenant, &[Scope::ActivityRead], &[one], 30).await;
    let revoke = |token: Uuid| {
        app.delete_json(&revoke_path(ws, token), &limited, &json!({"reason": "env"}))
            .send()
    };
    let denied = revoke(unlimited.id).await.unwrap();
    crate::support::assert_api_error(denied, 403, "forbidden").await;
    let denied = revoke(wider.id).await.unwrap();
    crate::support::assert_api_error(denied, 403, "forbidden").await;
    assert!(record(&app, unlimited.id).await.revoked_at.is_none());
    let allowed = revoke(within.id).await.unwrap();
    assert_eq!(allowed.status(), 200);
    assert!(record(&app, within.id).await.revoked_at.is_some());
    // An unknown token is still a 404 for a limited caller.
    let unknown = revoke(Uuid::new_v4()).await.unwrap();
    crate::support::assert_api_error(unknown, 404, "not_found").await;
}

/// (status, code, message, details) of an error response: everything but the correlation id.
async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert!(status >= 400, "{body}");
    let error = &body["error"];
    let mut rest = body.as_object().unwrap().clone();
    rest.remove("correlationId");
    rest.remove("error");
    assert!(rest.is_empty(), "only error and correlationId: {body}");
    (status, error.clone())
}

#[tokio::test]
async fn another_organisations_ids_answer_like_ids_that_do_not_exist() {
    let (app, tenant) = tenant_app().await;
    let other = app.bootstrap().await;
    let other_env = app.create_environment(other.workspace_id, "prod").await;
    let other_token = app
        .services
        .list_tokens(&TokenFilter {
            user_id: Some(other.user_id),
            ..TokenFilter::default()
        })
        .await
        .unwrap()
        .remove(0)
        .id;

    // Issuance: the organisation, a workspace, an environment.
    let same_ids = |mut body: Value, field: &str, foreign: Value, random: Value| {
        let app = &app;
        let token = tenant.token.clone();
        let mut random_body = body.clone();
        body[field] = foreign;
        random_body[field] = random;
        async move {
            let foreign = error_of(app.issue(&token, &body).await).await;
            let random = error_of(app.issue(&token, &random_body).await).await;
            (foreign, random)
        }
    };
    let base = issuance_body(&tenant);
    let random = Uuid::new_v4();
    let (foreign, unknown) = same_ids(
        base.clone(),
        "organisationId",
        json!(other.organisation_id),
        json!(random),
    )
    .await;
    assert_eq!(foreign.0, 404);
    // The details echo the id given; compare with the id replaced.
    let swap = |v: &Value, from: Uuid, to: Uuid| -> Value {
        serde_json::from_str(&v.to_string().replace(&from.to_string(), &to.to_string())).unwrap()
    };
    assert_eq!(
        (foreign.0, swap(&foreign.1, other.organisation_id, random)),
        unknown
    );
    let (foreign, unknown) = same_ids(
        base.clone(),
        "workspaceIds",
        json!([other.workspace_id]),
        json!([random]),
    )
    .await;
    assert_eq!(foreign.0, 404);
    assert_eq!(
        (foreign.0, swap(&foreign.1, other.workspace_id, random)),
        unknown
    );
    let (foreign, unknown) = same_ids(
        base.clone(),
        "environmentIds",
        json!([other_env]),
        json!([random]),
    )
    .await;
    assert_eq!(foreign.0, 404);
    assert_eq!((foreign.0, swap(&foreign.1, other_env, random)), unknown);

    // Revocation: another organisation's workspace, and another organisation's token.
    let revoke = |ws: Uuid, token: Uuid| {
        app.delete_json(
            &revoke_path(ws, token),
            &tenant.token,
            &json!({"reason": "probe"}),
        )
        .send()
    };
    let foreign = error_of(revoke(other.workspace_id, other_token).await.unwrap()).await;
    let unknown = error_of(revoke(random, other_token).await.unwrap()).await;
    assert_eq!(foreign, unknown);
    let foreign = error_of(revoke(tenant.workspace_id, other_token).await.unwrap()).await;
    let unknown = error_of(revoke(tenant.workspace_id, random).await.unwrap()).await;
    assert_eq!(foreign.0, 404);
    assert_eq!(foreign, unknown);

    // Activity.
    let activity = |ws: Uuid| app.get(&routes::activity(ws), &tenant.token).send();
    let foreign = error_of(activity(other.workspace_id).await.unwrap()).await;
    let unknown = error_of(activity(random).await.unwrap()).await;
    assert_eq!(foreign, unknown);
    let stream = |ws: Uuid| app.get(&routes::audit_stream(ws), &tenant.token).send();
    let foreign = error_of(stream(other.workspace_id).await.unwrap()).await;
    let unknown = error_of(stream(random).await.unwrap()).await;
    assert_eq!(foreign, unknown);
    // Inside the caller's organisation, a workspace it does not hold stays a 403.
    let mine = app
        .create_workspace(tenant.organisation_id, "not-held")
        .await;
    assert_eq!(activity_status(&app, &tenant.token, mine).await, 403);
}

/// A token and its child revoked with cascade at the same moment: each either revokes or finds
/// the grant gone (404), never a deadlock or a store error, and the whole tree ends revoked.
#[tokio::test]
async fn overlapping_cascades_neither_deadlock_nor_fail() {
    let (app, tenant) = tenant_app().await;
    for _ in 0..5 {
        let (root, root_secret) = admin_issue(&app, &tenant, ISSUER, &[], 30).await;
        let (child, child_secret, _) = child_of(&app, &tenant, &root_secret, CHILD).await;
        let (grandchild, _, _) = child_of(&app, &tenant, &child_secret, CHILD).await;
        let revoke = |token: Uuid| {
            let services = app.services.clone();
            let workspace = tenant.workspace_id;
            async move {
                let reason = RevocationReason::parse("race").unwrap();
                let cid = CorrelationId::generate();
                services
                    .revoke_token_access_as_admin(Some(workspace), token, reason, true, &cid)
                    .await
            }
        };
        let (a, b) = tokio::join!(revoke(root.id), revoke(child));
        assert!(a.is_ok(), "{a:?}");
        assert!(
            matches!(
                b,
                Ok(_) | Err(control_plane::service::ServiceError::NotFound { .. })
            ),
            "{b:?}"
        );
        for id in [root.id, child, grandchild] {
            assert!(record(&app, id).await.revoked_at.is_some());
        }
    }
}
