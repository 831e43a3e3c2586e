//! The audit log over the admin API: who may export and verify a workspace's log (its
//! organisation's administrators; another organisation's is a 404) and who may set retention
//! or purge (an operator only); the export streamed as NDJSON or CSV with a signed head at its
//! last event; the verification report and its anchor; and that retention and a purge are
//! recorded with the user and token that did them.

use control_plane::domain::{Role, Scope};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    Call, RoleHolder, Tenant, TestApp, event_actor, events_about, routes, tenant_app,
};

const ADMIN: &[Scope] = &[Scope::AdminRead, Scope::AdminWrite];

/// Each route of the audit admin API as the matrix calls it, and whether it is a read.
fn audit_routes(org: Uuid, workspace: Uuid) -> Vec<(Method, String, Option<Value>, bool)> {
    vec![
        (
            Method::GET,
            routes::audit_export(org, workspace),
            None,
            true,
        ),
        (
            Method::GET,
            format!("{}?format=csv", routes::audit_export(org, workspace)),
            None,
            true,
        ),
        (
            Method::GET,
            routes::audit_verification(org, workspace),
            None,
            true,
        ),
        (
            Method::PUT,
            routes::audit_retention(org),
            Some(json!({ "retentionSeconds": 7 * 86_400 })),
            false,
        ),
        (
            Method::POST,
            routes::AUDIT_PURGE.to_owned(),
            Some(json!({})),
            false,
        ),
    ]
}

async fn status_of(
    app: &TestApp,
    token: &str,
    method: &Method,
    path: &str,
    body: &Option<Value>,
) -> u16 {
    let mut request = app.request(method.clone(), path).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    request.status_code().await
}

/// The export's NDJSON lines.
async fn export_lines(app: &TestApp, path: &str, token: &str) -> Vec<Value> {
    let response = app.get(path, token).ok_response().await;
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/x-ndjson"
    );
    let text = response.text().await.unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

async fn some_events(app: &TestApp, tenant: &Tenant) {
    for _ in 0..3 {
        app.issue(&tenant.token, &crate::support::issuance_body(tenant))
            .await
            .ok_response()
            .await;
    }
}

#[tokio::test]
async fn the_role_table_decides_every_audit_operation() {
    let (app, tenant) = tenant_app().await;
    let (org, ws) = (tenant.organisation_id, tenant.workspace_id);
    some_events(&app, &tenant).await;
    // Another organisation: its admin, and its operator (bootstrap makes one).
    let other = app.bootstrap().await;
    let foreign_admin = app.user_in_role(&other, Role::Admin, ADMIN).await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let writer = app
        .user_in_role(&tenant, Role::Admin, &[Scope::AdminWrite])
        .await;
    let reading_operator = app
        .user_in_role(&tenant, Role::Operator, &[Scope::AdminRead])
        .await;
    let member = app
        .user_in_role(
            &tenant,
            Role::Member,
            &[Scope::ActivityRead, Scope::TokensIssue],
        )
        .await;

    for (method, path, body, read) in audit_routes(org, ws) {
        let label = format!("{method} {path}");
        let status = |who: &RoleHolder| {
            let token = who.token.clone();
            let (app, method, path, body) = (&app, &method, &path, &body);
            async move { status_of(app, &token, method, path, body).await }
        };
        assert_eq!(status(&member).await, 403, "member: {label}");
        assert_eq!(
            status(&foreign_admin).await,
            if read { 404 } else { 403 },
            "another organisation's admin: {label}"
        );
        assert_eq!(
            status(&admin).await,
            if read { 200 } else { 403 },
            "this organisation's admin: {label}"
        );
        assert_eq!(
            status(&writer).await,
            403,
            "an admin without the scope: {label}"
        );
        assert_eq!(
            status(&reading_operator).await,
            if read { 200 } else { 403 },
            "an operator with admin:read only: {label}"
        );
        assert_eq!(
            status_of(&app, &other.token, &method, &path, &body).await,
            200,
            "another organisation's operator: {label}"
        );
    }
    // A workspace of another organisation through this organisation's route is not found,
    // even by an operator; and an unknown organisation is not found.
    for path in [
        routes::audit_export(org, other.workspace_id),
        routes::audit_verification(org, other.workspace_id),
        routes::audit_export(org, Uuid::new_v4()),
    ] {
        app.get(&path, &admin.token).expect(404, "not_found").await;
        app.get(&path, &tenant.token).expect(404, "not_found").await;
    }
    app.get(
        &routes::audit_verification(Uuid::new_v4(), ws),
        &tenant.token,
    )
    .expect(404, "not_found")
    .await;
    // Verification-only keys for an export's signing are an operator's.
    let public = app.services.webhook_signer().public_keys()[0].whpk();
    app.get(&routes::audit_export(org, ws), &admin.token)
        .query(&[("auditKeys", public)])
        .expect(403, "forbidden")
        .await;
}

#[tokio::test]
async fn an_export_streams_every_event_then_a_head_signed_at_its_last() {
    let (app, tenant) = tenant_app().await;
    let (org, ws) = (tenant.organisation_id, tenant.workspace_id);
    some_events(&app, &tenant).await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;

    let lines = export_lines(&app, &routes::audit_export(org, ws), &admin.token).await;
    assert_eq!(lines[0]["auditExport"]["workspaceId"], json!(ws));
    assert_eq!(lines[0]["auditExport"]["chainFrom"]["sequence"], 0);
    let events: Vec<&Value> = lines.iter().filter(|l| l.get("id").is_some()).collect();
    let seqs: Vec<i64> = events
        .iter()
        .map(|e| e["sequence"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=events.len() as i64).collect::<Vec<_>>());
    assert!(events.len() >= 5, "{lines:?}");
    let last = *seqs.last().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l["signedHead"]["sequence"] == json!(last)),
        "a head signed at the last event: {lines:?}"
    );

    // CSV: a header, the events, then the proofs as rows.
    let response = app
        .get(
            &format!("{}?format=csv", routes::audit_export(org, ws)),
            &admin.token,
        )
        .ok_response()
        .await;
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/csv"
    );
    let csv = response.text().await.unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].starts_with("id,sequence,type,"));
    assert_eq!(
        rows.iter().filter(|r| !r.starts_with(',')).count(),
        events.len() + 1
    );
    assert!(csv.contains(",audit.signed_head,"));

    // A window that ends before everything: an empty export.
    let empty = app
        .get(
            &format!(
                "{}?until=2000-01-01T00:00:00Z",
                routes::audit_export(org, ws)
            ),
            &admin.token,
        )
        .ok_response()
        .await;
    assert_eq!(empty.text().await.unwrap(), "");
    for bad in ["since=yesterday", "format=xml", "until=1"] {
        app.get(
            &format!("{}?{bad}", routes::audit_export(org, ws)),
            &admin.token,
        )
        .expect(400, "validation_failed")
        .await;
    }
}

#[tokio::test]
async fn verification_reports_the_head_extends_an_anchor_and_names_a_break() {
    let (app, tenant) = tenant_app().await;
    let (org, ws) = (tenant.organisation_id, tenant.workspace_id);
    some_events(&app, &tenant).await;
    let path = routes::audit_verification(org, ws);
    let report: Value = app.get_ok(&path, &tenant.token).await;
    let v = &report["verification"];
    assert_eq!(v["intact"], true, "{report}");
    assert_eq!(v["verified"], v["headSequence"]);
    assert!(v["broken"].is_null());
    let anchor = format!("{}:{}", v["headSequence"], v["headHash"].as_str().unwrap());
    some_events(&app, &tenant).await;
    let later: Value = app
        .get_ok(&format!("{path}?anchor={anchor}"), &tenant.token)
        .await;
    assert_eq!(later["verification"]["anchorExtended"], true, "{later}");
    app.get(&format!("{path}?anchor=nope"), &tenant.token)
        .expect(400, "validation_failed")
        .await;

    crate::support::sql_exec!(
        &mut app.db().await,
        "UPDATE audit_events SET data = '{\"forged\": true}' WHERE workspace_id = $1 AND seq = 2",
        ws
    )
    .unwrap();
    let broken: Value = app.get_ok(&path, &tenant.token).await;
    let v = &broken["verification"];
    assert_eq!(v["intact"], false, "{broken}");
    assert_eq!(v["broken"]["problem"], "changed");
    assert_eq!(v["broken"]["sequence"], 2);
    assert_eq!(v["verified"], 1);
}

#[tokio::test]
async fn retention_and_a_purge_are_an_operators_and_name_who_did_them() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let operator = app.user_in_role(&tenant, Role::Operator, ADMIN).await;
    let put = |key: &str, body: Value| {
        app.request(Method::PUT, &routes::audit_retention(org))
            .bearer_auth(&operator.token)
            .header("Idempotency-Key", key)
            .json(&body)
    };
    let key = Uuid::new_v4().to_string();
    let set: Value = put(&key, json!({ "retentionSeconds": 7 * 86_400 }))
        .ok()
        .await;
    assert_eq!(
        set["auditRetention"],
        json!({ "organisationId": org, "retentionSeconds": 604_800, "retention": "1w" })
    );
    // A replay answers the same and writes nothing more.
    let again: Value = put(&key, json!({ "retentionSeconds": 7 * 86_400 }))
        .ok()
        .await;
    assert_eq!(again, set);
    assert_eq!(
        events_about(&app, "organisation.audit_retention_set", org)
            .await
            .0,
        1
    );
    assert_eq!(
        event_actor(&app, "organisation.audit_retention_set", org).await,
        (
            "user".into(),
            Some(operator.user_id),
            Some(operator.token_id)
        )
    );
    let forever: Value = put(
        &Uuid::new_v4().to_string(),
        json!({ "retentionSeconds": null }),
    )
    .ok()
    .await;
    assert!(forever["auditRetention"]["retentionSeconds"].is_null());
    for body in [
        json!({}),
        json!({ "retentionSeconds": 0 }),
        json!({ "retentionSeconds": "7d" }),
    ] {
        put(&Uuid::new_v4().to_string(), body)
            .expect(400, "validation_failed")
            .await;
    }
    app.request(Method::PUT, &routes::audit_retention(Uuid::new_v4()))
        .bearer_auth(&operator.token)
        .json(&json!({ "retentionSeconds": 60 }))
        .expect(404, "not_found")
        .await;

    // A purge: its counts, in the operator's organisation's log, with no workspace.
    let purged: Value = app
        .post_ok(routes::AUDIT_PURGE, &operator.token, &json!({}))
        .await;
    assert_eq!(purged["purge"]["removed"], 0, "{purged}");
    let (kind, user, token) = event_actor(&app, "audit.purged", org).await;
    assert_eq!(
        (kind, user, token),
        (
            "user".into(),
            Some(operator.user_id),
            Some(operator.token_id)
        )
    );
    let (workspace, data): (Option<Uuid>, String) = crate::support::sql_one!(
        &mut app.db().await,
        (Option<Uuid>, String),
        "SELECT workspace_id, CAST(data AS TEXT) FROM audit_events
         WHERE event_type = 'audit.purged' AND organisation_id = $1",
        org
    )
    .unwrap();
    assert_eq!(workspace, None);
    let data: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data["removed"], 0);
    assert_eq!(data["complete"], true);
}
