//! Workflows and their approvals over the admin API: an organisation's admin creates and lists
//! workflows and revisions and decides a pending one as itself (the caller is the decider, and
//! the four-eyes rule holds for it); only an operator switches that rule; another
//! organisation's workspace, workflow or revision is a 404; every change names its actor.

use control_plane::domain::{Role, Scope};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    Call, RoleHolder, Tenant, TestApp, event_actor, events_about, routes, tenant_app,
};
use crate::workflows::request_approval;

const ADMIN: &[Scope] = &[Scope::AdminRead, Scope::AdminWrite];

fn id_of(body: &Value, object: &str) -> Uuid {
    serde_json::from_value(body[object]["id"].clone()).unwrap()
}

/// A workflow created over the admin API by `by`, and a draft revision of it.
async fn draft(app: &TestApp, tenant: &Tenant, by: &RoleHolder, name: &str) -> (Uuid, Uuid) {
    let org = tenant.organisation_id;
    let created: Value = app
        .post_ok(
            &routes::workflows(org, tenant.workspace_id),
            &by.token,
            &json!({ "name": name }),
        )
        .await;
    let workflow = id_of(&created, "workflow");
    let revision: Value = app
        .post_ok(
            &routes::workflow_revisions(org, workflow),
            &by.token,
            &json!({}),
        )
        .await;
    assert_eq!(revision["revision"]["state"], "draft");
    (workflow, id_of(&revision, "revision"))
}

/// `draft`, then sent for approval by `requester` (a token with `workflows:request-approval`).
async fn pending(
    app: &TestApp,
    tenant: &Tenant,
    by: &RoleHolder,
    requester: &str,
    name: &str,
) -> (Uuid, Uuid) {
    let (workflow, revision) = draft(app, tenant, by, name).await;
    let response = request_approval(
        app,
        requester,
        tenant.workspace_id,
        workflow,
        revision,
        &json!({}),
    )
    .await;
    assert_eq!(response.status(), 200);
    (workflow, revision)
}

fn decide(
    app: &TestApp,
    org: Uuid,
    (workflow, revision): (Uuid, Uuid),
    verb: &str,
    token: &str,
) -> reqwest::RequestBuilder {
    app.request(
        Method::POST,
        &routes::decide_revision(org, workflow, revision, verb),
    )
    .bearer_auth(token)
    .json(&json!({ "reason": "checked the plan" }))
}

#[tokio::test]
async fn an_admin_creates_lists_and_decides_and_each_change_names_it() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let (workflow, revision) = draft(&app, &tenant, &admin, "deploy").await;
    assert_eq!(
        event_actor(&app, "workflow.created", workflow).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id))
    );
    assert_eq!(
        event_actor(&app, "workflow_revision.created", revision).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id))
    );
    let listed: Value = app
        .get_ok(&routes::workflows(org, tenant.workspace_id), &admin.token)
        .await;
    assert_eq!(listed["items"][0]["id"], json!(workflow));
    assert_eq!(listed["nextCursor"], Value::Null);
    app.post_json(
        &routes::workflows(org, tenant.workspace_id),
        &admin.token,
        &json!({ "name": "deploy" }),
    )
    .expect(409, "conflict")
    .await;

    // A draft is not decided; a pending one, by the caller, once.
    decide(&app, org, (workflow, revision), "approve", &admin.token)
        .expect(409, "invalid_transition")
        .await;
    let response = request_approval(
        &app,
        &tenant.token,
        tenant.workspace_id,
        workflow,
        revision,
        &json!({}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let key = format!("k-{}", Uuid::new_v4().simple());
    let approve = || {
        decide(&app, org, (workflow, revision), "approve", &admin.token)
            .header("idempotency-key", key.clone())
    };
    let approved: Value = approve().ok().await;
    let replay: Value = approve().ok().await;
    assert_eq!(
        approved, replay,
        "a keyed replay answers the first decision"
    );
    assert_eq!(approved["revision"]["state"], "approved");
    assert_eq!(approved["revision"]["decidedBy"], json!(admin.user_id));
    assert_eq!(approved["revision"]["decisionReason"], "checked the plan");
    assert_eq!(
        events_about(&app, "workflow_revision.approved", revision)
            .await
            .0,
        1
    );
    assert_eq!(
        event_actor(&app, "workflow_revision.approved", revision).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id))
    );
    for verb in ["reject", "approve"] {
        decide(&app, org, (workflow, revision), verb, &admin.token)
            .expect(409, "invalid_transition")
            .await;
    }
    // An empty reason is refused before anything runs.
    app.post_json(
        &routes::decide_revision(org, workflow, revision, "reject"),
        &admin.token,
        &json!({ "reason": "" }),
    )
    .expect(400, "validation_failed")
    .await;
}

#[tokio::test]
async fn the_caller_does_not_approve_its_own_request_until_an_operator_allows_it() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let requester = app
        .user_in_role(
            &tenant,
            Role::Admin,
            &[
                Scope::AdminRead,
                Scope::AdminWrite,
                Scope::WorkflowsRequestApproval,
            ],
        )
        .await;
    let own = pending(&app, &tenant, &requester, &requester.token, "own").await;
    let refused = decide(&app, org, own, "approve", &requester.token)
        .expect(403, "forbidden")
        .await;
    assert_eq!(
        refused["error"]["details"]["requestedBy"],
        json!(requester.user_id)
    );
    // Withdrawing one's own request is allowed.
    let withdrawn = pending(&app, &tenant, &requester, &requester.token, "withdrawn").await;
    let rejected: Value = decide(&app, org, withdrawn, "reject", &requester.token)
        .ok()
        .await;
    assert_eq!(rejected["revision"]["state"], "rejected");

    // The rule is not the admins' to lift: only an operator switches it.
    let allow = |token: &str| {
        app.request(Method::PUT, &routes::self_approval(org))
            .bearer_auth(token)
            .json(&json!({ "allowed": true }))
    };
    allow(&requester.token).expect(403, "forbidden").await;
    let foreign = app.bootstrap().await;
    let foreign_admin = app.user_in_role(&foreign, Role::Admin, ADMIN).await;
    allow(&foreign_admin.token).expect(403, "forbidden").await;
    assert_eq!(
        events_about(&app, "organisation.self_approval_set", org)
            .await
            .0,
        0
    );
    let set: Value = allow(&tenant.token).ok().await;
    assert_eq!(set, json!({ "organisationId": org, "selfApproval": true }));
    let (kind, user, token) = event_actor(&app, "organisation.self_approval_set", org).await;
    assert_eq!((kind.as_str(), user), ("user", Some(tenant.user_id)));
    assert!(token.is_some(), "the operator's token is named");
    let approved: Value = decide(&app, org, own, "approve", &requester.token)
        .ok()
        .await;
    assert_eq!(approved["revision"]["state"], "approved");
}

#[tokio::test]
async fn another_organisation_s_workflows_are_not_found() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let pending = pending(&app, &tenant, &admin, &tenant.token, "deploy").await;
    let other = app.bootstrap().await;
    let foreign = app.user_in_role(&other, Role::Admin, ADMIN).await;
    let theirs = other.organisation_id;

    // Named under its own organisation, this one's workflow and revision are unknown to it.
    for verb in ["approve", "reject"] {
        decide(&app, theirs, pending, verb, &foreign.token)
            .expect(404, "not_found")
            .await;
    }
    app.post_json(
        &routes::workflow_revisions(theirs, pending.0),
        &foreign.token,
        &json!({}),
    )
    .expect(404, "not_found")
    .await;
    for path in [
        routes::workflows(theirs, tenant.workspace_id),
        routes::workflows(org, tenant.workspace_id),
    ] {
        app.get(&path, &foreign.token)
            .expect(404, "not_found")
            .await;
    }
    // A revision of another workflow is not this workflow's.
    let (other_workflow, _) = draft(&app, &tenant, &admin, "other").await;
    decide(
        &app,
        org,
        (other_workflow, pending.1),
        "approve",
        &admin.token,
    )
    .expect(404, "not_found")
    .await;
    assert_eq!(
        events_about(&app, "workflow_revision.approved", pending.1)
            .await
            .0,
        0
    );
}

#[tokio::test]
async fn the_role_table_decides_every_workflow_operation() {
    let (app, tenant) = tenant_app().await;
    let org = tenant.organisation_id;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let (workflow, revision) = draft(&app, &tenant, &admin, "deploy").await;
    let other = app.bootstrap().await;
    let foreign_admin = app.user_in_role(&other, Role::Admin, ADMIN).await;
    let reader = app
        .user_in_role(&tenant, Role::Admin, &[Scope::AdminRead])
        .await;
    let member = app
        .user_in_role(&tenant, Role::Member, &[Scope::ActivityRead])
        .await;
    let ws = tenant.workspace_id;
    let routes: Vec<(Method, String, Value)> = vec![
        (Method::GET, routes::workflows(org, ws), Value::Null),
        (
            Method::POST,
            routes::workflows(org, ws),
            json!({ "name": format!("w-{}", Uuid::new_v4().simple()) }),
        ),
        (
            Method::POST,
            routes::workflow_revisions(org, workflow),
            json!({}),
        ),
        (
            Method::POST,
            routes::decide_revision(org, workflow, revision, "approve"),
            json!({ "reason": "x" }),
        ),
        (
            Method::POST,
            routes::decide_revision(org, workflow, revision, "reject"),
            json!({ "reason": "x" }),
        ),
    ];
    let status_of = async |token: &str, (method, path, body): &(Method, String, Value)| {
        let mut request = app.request(method.clone(), path).bearer_auth(token);
        if !body.is_null() {
            request = request.json(body);
        }
        request.status_code().await
    };
    for route in &routes {
        let label = format!("{} {}", route.0, route.1);
        assert_eq!(
            status_of(&member.token, route).await,
            403,
            "member: {label}"
        );
        assert_eq!(
            status_of(&foreign_admin.token, route).await,
            404,
            "another organisation's admin: {label}"
        );
        let by_reader = status_of(&reader.token, route).await;
        let read = route.0 == Method::GET;
        assert_eq!(
            by_reader,
            if read { 200 } else { 403 },
            "admin:read only: {label}"
        );
        // Allowed through: a decision of a draft is the state machine's 409.
        for (who, token) in [("admin", &admin.token), ("operator", &other.token)] {
            let status = status_of(token, route).await;
            assert!(status == 200 || status == 409, "{who}: {label}: {status}");
        }
    }
    // The self-approval rule: an operator's only.
    let rule = (
        Method::PUT,
        routes::self_approval(org),
        json!({ "allowed": false }),
    );
    assert_eq!(status_of(&member.token, &rule).await, 403);
    assert_eq!(status_of(&reader.token, &rule).await, 403);
    assert_eq!(status_of(&admin.token, &rule).await, 403);
    // The operator's alone: an admin is refused whichever organisation it names.
    assert_eq!(status_of(&foreign_admin.token, &rule).await, 403);
    assert_eq!(status_of(&other.token, &rule).await, 200);
}
