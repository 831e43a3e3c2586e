//! Requesting approval of a workflow revision.

use control_plane::domain::{Actor, CorrelationId, RevisionState, Scope};
use control_plane::service::ServiceError;
use control_plane::storage::WriteContext;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    Call, TestApp, assert_api_error, error_shape, routes, sql_all, sql_one, sql_value, tenant_app,
};

#[tokio::test]
async fn a_draft_goes_to_pending_approval_once() {
    let (app, tenant) = tenant_app().await;
    let (workflow, revision) = draft(&app, tenant.workspace_id, "deploy").await;
    let caller = app
        .scoped_token(&tenant, &[Scope::WorkflowsRequestApproval])
        .await;

    let response = request_approval(
        &app,
        &caller,
        tenant.workspace_id,
        workflow,
        revision,
        &json!({"comment": "ready for production"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-correlation-id"));
    let body: Value = response.json().await.unwrap();
    let revision_body = &body["revision"];
    assert_eq!(revision_body["id"], revision.to_string());
    assert_eq!(revision_body["workflowId"], workflow.to_string());
    assert_eq!(revision_body["number"], 1);
    assert_eq!(revision_body["state"], "pending_approval");
    assert_eq!(revision_body["requestedBy"], tenant.user_id.to_string());
    assert!(
        chrono::DateTime::parse_from_rfc3339(revision_body["requestedAt"].as_str().unwrap())
            .is_ok(),
        "{body}"
    );
    let (state, comment) = sql_one!(
        &mut app.db().await,
        (String, Option<String>),
        "SELECT state, request_comment FROM workflow_revisions WHERE id = $1",
        revision
    )
    .unwrap();
    assert_eq!(state, "pending_approval");
    assert_eq!(comment.as_deref(), Some("ready for production"));

    let again = request_approval(
        &app,
        &caller,
        tenant.workspace_id,
        workflow,
        revision,
        &json!({}),
    )
    .await;
    let err = assert_api_error(again, 409, "invalid_transition").await;
    assert_eq!(err["error"]["details"]["state"], "pending_approval");

    // The request is audited once, with the comment.
    let (n, data) = sql_one!(
        &mut app.db().await,
        (i64, String),
        "SELECT count(*) OVER (), CAST(data AS TEXT) FROM audit_events
         WHERE event_type = 'workflow_revision.approval_requested' AND target_id = $1",
        revision
    )
    .unwrap();
    let data: Value = serde_json::from_str(&data).expect("event data is JSON");
    assert_eq!(n, 1);
    assert_eq!(data["comment"], "ready for production");
    assert_eq!(data["workflowId"], workflow.to_string());
}

#[tokio::test]
async fn the_comment_is_optional_and_each_revision_has_its_own_state() {
    let (app, tenant) = tenant_app().await;
    let (workflow, first) = draft(&app, tenant.workspace_id, "build").await;
    let second = app
        .services
        .create_revision(workflow, &WriteContext::admin(&CorrelationId::generate()))
        .await
        .expect("second revision");
    assert_eq!(second.number, 2);

    let response = request_approval(
        &app,
        &tenant.token,
        tenant.workspace_id,
        workflow,
        second.id,
        &json!({}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["revision"]["number"], 2);
    assert_eq!(body["revision"]["state"], "pending_approval");

    // The first revision is still a draft.
    let response = request_approval(
        &app,
        &tenant.token,
        tenant.workspace_id,
        workflow,
        first,
        &json!({}),
    )
    .await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn unknown_or_mismatched_revisions_are_404_and_foreign_workspaces_403() {
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let (workflow, revision) = draft(&app, ws, "deploy").await;
    let (other_workflow, other_revision) = draft(&app, ws, "rollback").await;
    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let (far_workflow, far_revision) = draft(&app, second, "deploy").await;

    for (workflow_id, revision_id) in [
        (workflow.to_string(), Uuid::new_v4().to_string()),
        (Uuid::new_v4().to_string(), revision.to_string()),
        (workflow.to_string(), "not-a-uuid".to_owned()),
        ("not-a-uuid".to_owned(), revision.to_string()),
        // A revision of another workflow of the same workspace.
        (workflow.to_string(), other_revision.to_string()),
        (other_workflow.to_string(), revision.to_string()),
        // A workflow of another workspace, named under this one.
        (far_workflow.to_string(), far_revision.to_string()),
    ] {
        app.post_json(
            &routes::request_approval(ws, workflow_id, revision_id),
            &tenant.token,
            &json!({}),
        )
        .expect(404, "not_found")
        .await;
    }

    // Under its own workspace, which the token does not hold.
    let response = request_approval(
        &app,
        &tenant.token,
        second,
        far_workflow,
        far_revision,
        &json!({}),
    )
    .await;
    assert_api_error(response, 403, "forbidden").await;
    let other = app.bootstrap().await;
    let response = request_approval(&app, &other.token, ws, workflow, revision, &json!({})).await;
    assert_api_error(response, 403, "forbidden").await;

    // None of that touched the revisions.
    let states = sql_all!(
        &mut app.db().await,
        (String,),
        "SELECT state FROM workflow_revisions"
    )
    .unwrap();
    assert_eq!(states.len(), 3);
    assert!(states.iter().all(|(s,)| s == "draft"), "{states:?}");
}

#[tokio::test]
async fn a_token_limited_to_environments_cannot_request_approval() {
    // Workflows carry no environment, so they lie outside every environment-limited token.
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let staging = app.create_environment(ws, "staging").await;
    let (workflow, revision) = draft(&app, ws, "deploy").await;
    let limited = app
        .admin_token(
            &tenant,
            &[Scope::WorkflowsRequestApproval],
            &[ws],
            &[staging],
        )
        .await;

    let response = request_approval(&app, &limited, ws, workflow, revision, &json!({})).await;
    assert_api_error(response, 403, "forbidden").await;
    // Existence is still answered before escalation, as everywhere.
    let response = request_approval(&app, &limited, ws, workflow, Uuid::new_v4(), &json!({})).await;
    assert_api_error(response, 404, "not_found").await;
    let state = sql_value!(
        app,
        String,
        "SELECT state FROM workflow_revisions WHERE id = $1",
        revision
    );
    assert_eq!(state, "draft");

    let unlimited = app
        .admin_token(&tenant, &[Scope::WorkflowsRequestApproval], &[ws], &[])
        .await;
    let response = request_approval(&app, &unlimited, ws, workflow, revision, &json!({})).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn another_organisations_revision_is_a_404_like_an_unknown_one() {
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let (workflow, _) = draft(&app, ws, "deploy").await;
    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let (near_workflow, near_revision) = draft(&app, second, "deploy").await;
    let elsewhere = app.bootstrap().await;
    let (far_workflow, far_revision) = draft(&app, elsewhere.workspace_id, "deploy").await;

    let unknown = request_approval(
        &app,
        &tenant.token,
        ws,
        Uuid::new_v4(),
        Uuid::new_v4(),
        &json!({}),
    )
    .await;
    let unknown = error_shape(unknown).await;
    assert_eq!(unknown["status"], 404, "{unknown}");
    for (w, r) in [
        (near_workflow, near_revision),
        (far_workflow, far_revision),
        (workflow, far_revision),
        (far_workflow, Uuid::new_v4()),
    ] {
        let response = request_approval(&app, &tenant.token, ws, w, r, &json!({})).await;
        assert_eq!(error_shape(response).await, unknown, "{w} {r}");
    }
}

#[tokio::test]
async fn the_comment_is_bounded_and_the_body_closed() {
    let (app, tenant) = tenant_app().await;
    let (workflow, revision) = draft(&app, tenant.workspace_id, "deploy").await;
    for body in [
        json!({"comment": "c".repeat(1001)}),
        json!({"comment": ""}),
        json!({"comment": 5}),
        json!({"comment": "fine", "approver": "me"}),
        json!("comment"),
    ] {
        let response = request_approval(
            &app,
            &tenant.token,
            tenant.workspace_id,
            workflow,
            revision,
            &body,
        )
        .await;
        let err = assert_api_error(response, 400, "validation_failed").await;
        assert!(err["error"]["details"]["field"].is_string(), "{body}");
    }
    let response = request_approval(
        &app,
        &tenant.token,
        tenant.workspace_id,
        workflow,
        revision,
        &json!({"comment": "c".repeat(1000)}),
    )
    .await;
    assert_eq!(response.status(), 200);
}

/// A decision made by the service's rule (the admin API's `approve|reject` calls it) is what
/// the API then sees: the activity shows it with the deciding admin as the actor, and a second
/// request for approval meets the decided state.
#[tokio::test]
async fn an_administrators_decision_is_seen_by_the_api() {
    let (app, tenant) = tenant_app().await;
    let mut revisions = Vec::new();
    for name in ["approved", "rejected"] {
        let (workflow, revision) = draft(&app, tenant.workspace_id, name).await;
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
        revisions.push((workflow, revision));
    }
    // Another administrator decides: the requester may not approve its own request.
    let reviewer = app
        .services
        .create_user_as(
            tenant.organisation_id,
            "reviewer@example.com",
            control_plane::domain::Role::Admin,
            &CorrelationId::generate(),
        )
        .await
        .unwrap();
    // Written as the reviewer (over HTTP, its token would be named too).
    let as_reviewer =
        || WriteContext::immediate(CorrelationId::generate(), Actor::user_only(reviewer.id));
    for ((_, revision), to) in revisions
        .iter()
        .zip([RevisionState::Approved, RevisionState::Rejected])
    {
        let decided = app
            .services
            .decide_revision(*revision, to, &reviewer, "reviewed", &as_reviewer())
            .await
            .expect("decided");
        assert_eq!(decided.state, to);
        assert_eq!(decided.decided_by, Some(reviewer.id));
        // A second decision, either way, is the state machine's conflict.
        for again in [RevisionState::Approved, RevisionState::Rejected] {
            let refused = app
                .services
                .decide_revision(*revision, again, &reviewer, "again", &as_reviewer())
                .await;
            assert!(
                matches!(
                    refused,
                    Err(ServiceError::Conflict {
                        code: "invalid_transition",
                        ..
                    })
                ),
                "{refused:?}"
            );
        }
    }

    for ((workflow, revision), state) in revisions.iter().zip(["approved", "rejected"]) {
        let response = request_approval(
            &app,
            &tenant.token,
            tenant.workspace_id,
            *workflow,
            *revision,
            &json!({}),
        )
        .await;
        let err = assert_api_error(response, 409, "invalid_transition").await;
        assert_eq!(err["error"]["details"]["state"], state);
    }
    let page: Value = app.activity(&tenant, "?limit=100").await;
    for ((_, revision), event_type) in revisions
        .iter()
        .zip(["workflow_revision.approved", "workflow_revision.rejected"])
    {
        let events: Vec<&Value> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == event_type)
            .collect();
        assert_eq!(events.len(), 1, "{event_type}");
        let event = events[0];
        assert_eq!(event["target"]["id"], revision.to_string());
        assert_eq!(event["actor"]["kind"], "user");
        assert_eq!(event["actor"]["id"], reviewer.id.to_string());
        assert_eq!(event["data"]["from"], "pending_approval");
        assert_eq!(event["data"]["reason"], "reviewed");
    }
}

/// A workflow with one draft revision: (workflow id, revision id).
pub(crate) async fn draft(app: &TestApp, workspace: Uuid, name: &str) -> (Uuid, Uuid) {
    let cid = CorrelationId::generate();
    let workflow = app
        .services
        .create_workflow(workspace, name, &WriteContext::admin(&cid))
        .await
        .expect("workflow");
    let revision = app
        .services
        .create_revision(workflow.id, &WriteContext::admin(&cid))
        .await
        .expect("revision");
    assert_eq!(revision.number, 1);
    (workflow.id, revision.id)
}

pub(crate) async fn request_approval(
    app: &TestApp,
    token: &str,
    workspace: Uuid,
    workflow: Uuid,
    revision: Uuid,
    body: &Value,
) -> reqwest::Response {
    app.post_json(
        &routes::request_approval(workspace, workflow, revision),
        token,
        body,
    )
    .response()
    .await
}
