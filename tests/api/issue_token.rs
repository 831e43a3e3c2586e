use chrono::{DateTime, Utc};
use control_plane::domain::Scope;
use control_plane::storage::{InsertTokenError, NewToken, TokenFilter, TokenRecord};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    Tenant, TestDb, assert_api_error, issuance_body, spawn_app, spawn_app_with, sql_all, sql_exec,
    sql_one,
};

const CREDENTIAL_FIELDS: [&str; 10] = [
    "createdAt",
    "environmentIds",
    "expiresAt",
    "id",
    "name",
    "organisationId",
    "prefix",
    "scopes",
    "token",
    "workspaceIds",
];

#[tokio::test]
async fn issues_exactly_the_envelope_with_defaults() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let body = issuance_body(&tenant);
    let response = app.issue(&tenant.token, &body).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-correlation-id"));
    assert!(!response.headers().contains_key("idempotency-replayed"));
    let envelope: Value = response.json().await.unwrap();
    assert_eq!(
        envelope.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["credential"]
    );
    let credential = &envelope["credential"];
    let mut keys: Vec<&str> = credential
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(keys, CREDENTIAL_FIELDS);
    assert_eq!(credential["name"], body["name"]);
    assert_eq!(credential["scopes"], json!(["activity:read"]));
    assert_eq!(credential["organisationId"], json!(tenant.organisation_id));
    assert_eq!(credential["workspaceIds"], json!([tenant.workspace_id]));
    assert_eq!(credential["environmentIds"], json!([]));
    let created: DateTime<Utc> = credential["createdAt"].as_str().unwrap().parse().unwrap();
    let expires: DateTime<Utc> = credential["expiresAt"].as_str().unwrap().parse().unwrap();
    assert_eq!(expires - created, chrono::Duration::days(30));
    let token = credential["token"].as_str().unwrap();
    let prefix = credential["prefix"].as_str().unwrap();
    assert!(
        prefix.starts_with("cpat_") && token.starts_with(prefix) && token.len() > prefix.len() + 30
    );

    // The new token authenticates, with just the scope it was given.
    let ok = app
        .get(
            &format!("/v1/workspaces/{}/activity", tenant.workspace_id),
            token,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let denied = app.issue(token, &issuance_body(&tenant)).await;
    assert_api_error(denied, 403, "forbidden").await;
}

#[tokio::test]
async fn expires_in_days_boundaries() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    for (value, status) in [
        (json!(1), 200),
        (json!(90), 200),
        (json!(0), 400),
        (json!(91), 400),
        (json!(-1), 400),
    ] {
        let mut body = issuance_body(&tenant);
        body["expiresInDays"] = value.clone();
        let response = app.issue(&tenant.token, &body).await;
        if status == 200 {
            let credential: Value = response.json().await.unwrap();
            let created: DateTime<Utc> = credential["credential"]["createdAt"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            let expires: DateTime<Utc> = credential["credential"]["expiresAt"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            if value == json!(90) {
                // Capped at the caller's expiry (its token is 90 days old at most).
                let caller = app.services.authenticate(&tenant.token).await.unwrap();
                assert_eq!(expires, caller.expires_at);
            } else {
                assert_eq!((expires - created).num_days(), value.as_i64().unwrap());
            }
        } else {
            let err = assert_api_error(response, 400, "validation_failed").await;
            assert_eq!(err["error"]["details"]["field"], "expiresInDays", "{value}");
        }
    }
    for bad in [json!("30"), json!(1.5), json!(null), json!(true)] {
        let mut body = issuance_body(&tenant);
        body["expiresInDays"] = bad.clone();
        let err = assert_api_error(
            app.issue(&tenant.token, &body).await,
            400,
            "validation_failed",
        )
        .await;
        assert_eq!(err["error"]["details"]["field"], "expiresInDays", "{bad}");
    }
}

#[tokio::test]
async fn name_boundaries_count_characters() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    for (name, ok) in [
        ("a".to_owned(), true),
        ("é".repeat(120), true),
        ("n".repeat(120), true),
        (String::new(), false),
        ("n".repeat(121), false),
    ] {
        let mut body = issuance_body(&tenant);
        body["name"] = json!(name);
        let response = app.issue(&tenant.token, &body).await;
        if ok {
            assert_eq!(response.status(), 200, "{} chars", name.chars().count());
        } else {
            let err = assert_api_error(response, 400, "validation_failed").await;
            assert_eq!(err["error"]["details"]["field"], "name");
        }
    }
}

#[tokio::test]
async fn every_field_constraint_is_a_400_naming_the_field() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    type Mutation = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "name",
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("name");
            }),
        ),
        ("name", Box::new(|b| b["name"] = json!(42))),
        (
            "scopes",
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("scopes");
            }),
        ),
        ("scopes", Box::new(|b| b["scopes"] = json!("activity:read"))),
        (
            "scopes[1]",
            Box::new(|b| b["scopes"] = json!(["activity:read", "admin:everything"])),
        ),
        ("scopes[0]", Box::new(|b| b["scopes"] = json!([7]))),
        (
            "organisationId",
            Box::new(|b| b["organisationId"] = json!("not-a-uuid")),
        ),
        (
            "organisationId",
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("organisationId");
            }),
        ),
        ("workspaceIds", Box::new(|b| b["workspaceIds"] = json!([]))),
        (
            "workspaceIds",
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("workspaceIds");
            }),
        ),
        (
            "workspaceIds[0]",
            Box::new(|b| b["workspaceIds"] = json!(["nope"])),
        ),
        (
            "environmentIds[0]",
            Box::new(|b| b["environmentIds"] = json!(["nope"])),
        ),
        (
            "environmentIds",
            Box::new(|b| b["environmentIds"] = json!(null)),
        ),
        ("owner", Box::new(|b| b["owner"] = json!("me"))),
    ];
    for (field, mutate) in cases {
        let mut body = issuance_body(&tenant);
        mutate(&mut body);
        let err = assert_api_error(
            app.issue(&tenant.token, &body).await,
            400,
            "validation_failed",
        )
        .await;
        assert_eq!(err["error"]["details"]["field"], field, "{body}");
    }
    // An unknown scope names the offending value.
    let mut body = issuance_body(&tenant);
    body["scopes"] = json!(["admin:everything"]);
    let err = assert_api_error(
        app.issue(&tenant.token, &body).await,
        400,
        "validation_failed",
    )
    .await;
    assert_eq!(
        err["error"]["details"]["errors"][0]["value"],
        "admin:everything"
    );
}

#[tokio::test]
async fn an_empty_scope_list_is_allowed_and_duplicates_collapse() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let mut body = issuance_body(&tenant);
    body["scopes"] = json!([]);
    assert_eq!(app.issue(&tenant.token, &body).await.status(), 200);
    let mut body = issuance_body(&tenant);
    body["scopes"] = json!(["audit:read", "activity:read", "audit:read"]);
    body["workspaceIds"] = json!([tenant.workspace_id, tenant.workspace_id]);
    let credential: Value = app.issue(&tenant.token, &body).await.json().await.unwrap();
    assert_eq!(
        credential["credential"]["scopes"],
        json!(["audit:read", "activity:read"])
    );
    assert_eq!(
        credential["credential"]["workspaceIds"],
        json!([tenant.workspace_id])
    );
}

#[tokio::test]
async fn issuance_never_escalates() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let second_ws = app.create_workspace(tenant.organisation_id, "second").await;
    let other = app.bootstrap().await;
    // A caller with tokens:issue and activity:read on the first workspace only.
    let caller = app
        .admin_token(
            &tenant,
            &[Scope::TokensIssue, Scope::ActivityRead],
            &[tenant.workspace_id],
            &[],
        )
        .await;

    let mut body = issuance_body(&tenant);
    body["scopes"] = json!(["activity:read", "audit:read"]);
    let err = assert_api_error(app.issue(&caller, &body).await, 403, "forbidden").await;
    assert_eq!(err["error"]["details"]["scopes"], json!(["audit:read"]));

    let mut body = issuance_body(&tenant);
    body["workspaceIds"] = json!([tenant.workspace_id, second_ws]);
    assert_api_error(app.issue(&caller, &body).await, 403, "forbidden").await;

    // Another organisation is a 404, as if it did not exist (tests/api/lineage.rs compares).
    let mut body = issuance_body(&tenant);
    body["organisationId"] = json!(other.organisation_id);
    assert_api_error(app.issue(&caller, &body).await, 404, "not_found").await;

    let mut body = issuance_body(&tenant);
    body["workspaceIds"] = json!([other.workspace_id]);
    assert_api_error(app.issue(&caller, &body).await, 404, "not_found").await;

    // Without tokens:issue nothing can be issued at all.
    let reader = app
        .admin_token(&tenant, &[Scope::ActivityRead], &[tenant.workspace_id], &[])
        .await;
    assert_api_error(
        app.issue(&reader, &issuance_body(&tenant)).await,
        403,
        "forbidden",
    )
    .await;
}

#[tokio::test]
async fn a_caller_limited_to_environments_stays_within_them() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let staging = app.create_environment(tenant.workspace_id, "staging").await;
    let prod = app.create_environment(tenant.workspace_id, "prod").await;
    let caller = app
        .admin_token(
            &tenant,
            &[Scope::TokensIssue, Scope::ActivityRead],
            &[tenant.workspace_id],
            &[staging],
        )
        .await;

    let mut body = issuance_body(&tenant);
    body["environmentIds"] = json!([staging]);
    assert_eq!(app.issue(&caller, &body).await.status(), 200);
    let mut body = issuance_body(&tenant);
    body["environmentIds"] = json!([prod]);
    assert_api_error(app.issue(&caller, &body).await, 403, "forbidden").await;
    // No environments means all of them: wider than the caller's.
    assert_api_error(
        app.issue(&caller, &issuance_body(&tenant)).await,
        403,
        "forbidden",
    )
    .await;
}

#[tokio::test]
async fn unknown_references_are_404() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let second_ws = app.create_workspace(tenant.organisation_id, "second").await;
    let env_of_second = app.create_environment(second_ws, "elsewhere").await;
    let cases = [
        ("organisationId", json!(Uuid::new_v4())),
        ("workspaceIds", json!([Uuid::new_v4()])),
        ("environmentIds", json!([Uuid::new_v4()])),
        // An environment outside the given workspaces.
        ("environmentIds", json!([env_of_second])),
    ];
    for (field, value) in cases {
        let mut body = issuance_body(&tenant);
        body[field] = value;
        let err = assert_api_error(app.issue(&tenant.token, &body).await, 404, "not_found").await;
        assert_eq!(err["error"]["details"]["field"], field);
    }
}

#[tokio::test]
async fn a_duplicate_active_name_is_409_until_revoked() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let body = issuance_body(&tenant);
    let first: Value = app.issue(&tenant.token, &body).await.json().await.unwrap();
    let err = assert_api_error(app.issue(&tenant.token, &body).await, 409, "conflict").await;
    assert_eq!(err["error"]["details"]["field"], "name");

    let id = first["credential"]["id"].as_str().unwrap();
    let revoke = app
        .delete_json(
            &format!("/v1/workspaces/{}/access-tokens/{id}", tenant.workspace_id),
            &tenant.token,
            &json!({"reason": "rotate"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(revoke.status(), 200);
    assert_eq!(app.issue(&tenant.token, &body).await.status(), 200);
}

#[tokio::test]
async fn active_tokens_per_user_are_capped() {
    let app = spawn_app_with(|c| c.max_active_tokens_per_user = 3).await;
    let tenant = app.bootstrap().await; // the bootstrap token is the first
    assert_eq!(
        app.issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status(),
        200
    );
    assert_eq!(
        app.issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status(),
        200
    );
    let err = assert_api_error(
        app.issue(&tenant.token, &issuance_body(&tenant)).await,
        409,
        "token_limit_reached",
    )
    .await;
    assert_eq!(err["error"]["details"]["limit"], 3);
}

#[tokio::test]
async fn issuance_writes_its_audit_event_in_each_workspace() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let cid = "audit-check-0001";
    let response = app
        .post_json(
            "/v1/personal-access-tokens",
            &tenant.token,
            &issuance_body(&tenant),
        )
        .header("x-correlation-id", cid)
        .send()
        .await
        .unwrap();
    let credential: Value = response.json().await.unwrap();
    let token_id: Uuid = credential["credential"]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let rows = sql_all!(
        &mut app.db().await,
        (String, Option<Uuid>, String, String),
        "SELECT event_type, workspace_id, correlation_id, CAST(data AS TEXT) FROM audit_events
         WHERE target_id = $1",
        token_id
    )
    .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].0, "token.issued");
    assert_eq!(rows[0].1, Some(tenant.workspace_id));
    assert_eq!(rows[0].2, cid);
    let data: Value = serde_json::from_str(&rows[0].3).expect("event data is JSON");
    assert_eq!(data["tokenId"], token_id.to_string(), "{data}");
    assert!(
        !rows[0]
            .3
            .contains(credential["credential"]["token"].as_str().unwrap())
    );
}

async fn row_counts(db: &mut TestDb) -> (i64, i64) {
    sql_one!(
        db,
        (i64, i64),
        "SELECT (SELECT count(*) FROM tokens), (SELECT count(*) FROM audit_events)"
    )
    .unwrap()
}

#[tokio::test]
async fn a_failed_issuance_writes_nothing() {
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let mut db = app.db().await;
    let before = row_counts(&mut db).await;
    let body = issuance_body(&tenant);
    assert_eq!(app.issue(&tenant.token, &body).await.status(), 200);
    assert_eq!(app.issue(&tenant.token, &body).await.status(), 409);
    assert_eq!(row_counts(&mut db).await, (before.0 + 1, before.1 + 1));
}

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
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
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
    let refused = store.insert_token(&token, &[], 100, now).await;
    assert!(
        matches!(refused, Err(InsertTokenError::IssuerLostAccess)),
        "{refused:?}"
    );
    let count = "SELECT count(*) FROM tokens WHERE name = 'issued-while-revoked'";
    assert_eq!(sql_one!(&mut db, (i64,), count).unwrap().0, 0);

    sql_exec!(&mut db, revoke, None::<DateTime<Utc>>, issuer.id).unwrap();
    store.insert_token(&token, &[], 100, now).await.unwrap();
    assert_eq!(sql_one!(&mut db, (i64,), count).unwrap().0, 1);
}

/// Concurrent issuances for one user end as they would one after another, whatever gathers
/// them (Postgres batches the ones that wait together, SQLite runs them in turn): each name is
/// taken once, the cap holds exactly, and every issued token has its event and nothing else.
#[tokio::test]
async fn concurrent_issuances_share_names_and_the_cap_as_if_one_after_another() {
    use control_plane::domain::{Actor, NewAuditEvent};

    let app = spawn_app().await;
    let tenant = app.bootstrap().await; // the bootstrap token is the user's first active token
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
    let outcomes = futures_util::future::join_all(
        tokens
            .iter()
            .zip(&events)
            .map(|(t, e)| store.insert_token(t, e, 9, now)),
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
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
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
    let outcomes =
        futures_util::future::join_all(tokens.iter().map(|t| store.insert_token(t, &[], 100, now)))
            .await;
    let pair_issued = outcomes[..2].iter().filter(|o| o.is_ok()).count();
    assert_eq!(pair_issued, 1, "{outcomes:?}");
    assert!(outcomes[2].is_ok(), "{outcomes:?}");
    let mut db = app.db().await;
    let names =
        "SELECT count(*) FROM tokens WHERE name IN ('collides-a', 'collides-b', 'stands-alone')";
    assert_eq!(sql_one!(&mut db, (i64,), names).unwrap().0, 2);
}
