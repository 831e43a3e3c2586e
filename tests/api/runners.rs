//! Runner pool deletion and command submission.

use control_plane::domain::Scope;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::runner::command_status_of;
use crate::support::{
    Call, Tenant, TestApp, assert_api_error, create_pool, error_shape, routes, sql_one, sql_value,
    tenant_app,
};

#[tokio::test]
async fn an_idle_pool_is_deleted_once_and_then_takes_no_commands() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "build").await;

    let response = delete_pool(&app, &tenant, pool, &json!({"reason": "decommissioned"})).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-correlation-id"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["pool"]["id"], pool.to_string());
    assert_eq!(body["pool"]["workspaceId"], tenant.workspace_id.to_string());
    assert_eq!(body["pool"]["name"], "build");
    let deleted_at = body["pool"]["deletedAt"].as_str().expect("deletedAt");
    assert!(
        chrono::DateTime::parse_from_rfc3339(deleted_at).is_ok(),
        "{deleted_at}"
    );
    assert_eq!(body["cancelledCommands"], 0);

    let again = delete_pool(&app, &tenant, pool, &json!({"force": true})).await;
    assert_api_error(again, 404, "not_found").await;

    let response = submit(&app, &tenant, &json!({"poolId": pool, "command": "echo"})).await;
    let err = assert_api_error(response, 409, "pool_deleted").await;
    assert_eq!(err["error"]["details"]["field"], "poolId");
}

#[tokio::test]
async fn a_pool_with_an_open_command_is_busy_until_force_cancels_it() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "busy").await;
    let command = submitted(&app, &tenant, pool).await;

    for body in [json!({}), json!({"reason": "cleanup", "force": false})] {
        let response = delete_pool(&app, &tenant, pool, &body).await;
        let err = assert_api_error(response, 409, "pool_busy").await;
        assert_eq!(err["error"]["details"]["openCommands"], 1, "{body}");
    }
    assert_eq!(command_status_of(&app, command).await, "queued");

    let response = delete_pool(
        &app,
        &tenant,
        pool,
        &json!({"reason": "stuck runner", "force": true}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["cancelledCommands"], 1);
    assert!(body["pool"]["deletedAt"].is_string());
    assert_eq!(command_status_of(&app, command).await, "cancelled");

    let again = delete_pool(&app, &tenant, pool, &json!({"force": true})).await;
    assert_api_error(again, 404, "not_found").await;
}

#[tokio::test]
async fn unknown_pools_and_bad_delete_bodies() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "kept").await;
    for id in [Uuid::new_v4().to_string(), "not-a-uuid".to_owned()] {
        app.delete_json(
            &routes::runner_pool(tenant.workspace_id, id),
            &tenant.token,
            &json!({}),
        )
        .expect(404, "not_found")
        .await;
    }
    for body in [
        json!({"reason": ""}),
        json!({"reason": "r".repeat(501)}),
        json!({"force": "yes"}),
        json!({"reason": "ok", "cascade": true}),
        json!([]),
    ] {
        let response = delete_pool(&app, &tenant, pool, &body).await;
        let err = assert_api_error(response, 400, "validation_failed").await;
        assert!(err["error"]["details"]["field"].is_string(), "{body}");
    }
    // None of those deleted it.
    let response = delete_pool(&app, &tenant, pool, &json!({"reason": "r".repeat(500)})).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_submitted_command_is_queued_with_a_pending_delivery() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "deploy").await;
    let env = app
        .create_environment(tenant.workspace_id, "production")
        .await;

    let response = submit(
        &app,
        &tenant,
        &json!({
            "poolId": pool,
            "command": "deploy",
            "args": ["--tag", "v1.2.3"],
            "environmentId": env,
            "timeoutSeconds": 60,
        }),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let command = &body["command"];
    let id: Uuid = command["id"].as_str().unwrap().parse().unwrap();
    let delivery: Uuid = command["deliveryId"].as_str().unwrap().parse().unwrap();
    assert_ne!(id, delivery);
    assert_eq!(command["workspaceId"], tenant.workspace_id.to_string());
    assert_eq!(command["poolId"], pool.to_string());
    assert_eq!(command["environmentId"], env.to_string());
    assert_eq!(command["command"], "deploy");
    assert_eq!(command["args"], json!(["--tag", "v1.2.3"]));
    assert_eq!(command["timeoutSeconds"], 60);
    assert_eq!(command["status"], "queued");
    assert!(
        chrono::DateTime::parse_from_rfc3339(command["createdAt"].as_str().unwrap()).is_ok(),
        "{command}"
    );
    let (status, command_id) = sql_one!(
        &mut app.db().await,
        (String, Uuid),
        "SELECT status, command_id FROM webhook_deliveries WHERE id = $1",
        delivery
    )
    .unwrap();
    assert_eq!(status, "pending");
    assert_eq!(command_id, id);

    // The optional fields take their defaults.
    let response = submit(&app, &tenant, &json!({"poolId": pool, "command": "status"})).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["command"]["args"], json!([]));
    assert!(body["command"]["environmentId"].is_null());
    assert_eq!(body["command"]["timeoutSeconds"], 3600);
}

#[tokio::test]
async fn submission_refuses_unknown_pools_foreign_environments_and_bad_fields() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "main").await;
    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let foreign_env = app.create_environment(second, "staging").await;
    let foreign_pool = create_pool(&app, second, "other").await;

    for body in [
        json!({"poolId": Uuid::new_v4(), "command": "echo"}),
        // A pool of another workspace is not in this one.
        json!({"poolId": foreign_pool, "command": "echo"}),
    ] {
        let err = assert_api_error(submit(&app, &tenant, &body).await, 404, "not_found").await;
        assert_eq!(err["error"]["details"]["field"], "poolId", "{body}");
    }
    for env in [foreign_env, Uuid::new_v4()] {
        let body = json!({"poolId": pool, "command": "echo", "environmentId": env});
        let err = assert_api_error(submit(&app, &tenant, &body).await, 404, "not_found").await;
        assert_eq!(err["error"]["details"]["field"], "environmentId", "{body}");
    }
    for (body, field) in [
        (
            json!({"poolId": pool, "command": "echo", "shell": true}),
            "shell",
        ),
        (
            json!({"poolId": pool, "command": "echo", "timeoutSeconds": 0}),
            "timeoutSeconds",
        ),
        (
            json!({"poolId": pool, "command": "echo", "timeoutSeconds": 86_401}),
            "timeoutSeconds",
        ),
        (
            json!({"poolId": pool, "command": "echo", "timeoutSeconds": 1.5}),
            "timeoutSeconds",
        ),
        (json!({"poolId": pool, "command": ""}), "command"),
        (
            json!({"poolId": pool, "command": "c".repeat(201)}),
            "command",
        ),
        (json!({"poolId": pool}), "command"),
        (json!({"command": "echo"}), "poolId"),
        (json!({"poolId": "nope", "command": "echo"}), "poolId"),
        (
            json!({"poolId": pool, "command": "echo", "args": [1]}),
            "args[0]",
        ),
        (
            json!({"poolId": pool, "command": "echo", "args": args(65)}),
            "args",
        ),
    ] {
        let err =
            assert_api_error(submit(&app, &tenant, &body).await, 400, "validation_failed").await;
        let fields: Vec<&str> = err["error"]["details"]["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .filter_map(|e| e["field"].as_str())
            .collect();
        assert!(fields.contains(&field), "{field} in {err}");
    }
    // Nothing above was stored.
    let n = sql_value!(app, i64, "SELECT count(*) FROM runner_commands");
    assert_eq!(n, 0);
    // The bounds themselves are accepted.
    let body =
        json!({"poolId": pool, "command": "echo", "timeoutSeconds": 86_400, "args": args(64)});
    assert_eq!(submit(&app, &tenant, &body).await.status(), 200);
}

#[tokio::test]
async fn a_token_of_one_workspace_cannot_touch_another_workspaces_pool() {
    let (app, tenant) = tenant_app().await;
    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let other_pool = create_pool(&app, second, "theirs").await;
    let other = app.bootstrap().await;
    let other_org_pool = create_pool(&app, other.workspace_id, "foreign").await;

    // The bootstrap token holds only the first workspace.
    for (workspace, pool) in [(second, other_pool), (other.workspace_id, other_org_pool)] {
        app.delete_json(
            &routes::runner_pool(workspace, pool),
            &tenant.token,
            &json!({"force": true}),
        )
        .expect(403, "forbidden")
        .await;
        app.post_json(
            &routes::runner_commands(workspace),
            &tenant.token,
            &json!({"poolId": pool, "command": "echo"}),
        )
        .expect(403, "forbidden")
        .await;
        // Through its own workspace's path, the pool is not there.
        let response = delete_pool(&app, &tenant, pool, &json!({"force": true})).await;
        assert_api_error(response, 404, "not_found").await;
    }

    // The pool is untouched: a token of its workspace deletes it.
    let theirs = app
        .admin_token(&tenant, &[Scope::RunnerPoolsDelete], &[second], &[])
        .await;
    app.delete_json(
        &routes::runner_pool(second, other_pool),
        &theirs,
        &json!({}),
    )
    .ok_response()
    .await;
}

#[tokio::test]
async fn a_token_limited_to_environments_names_one_of_them() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "envs").await;
    let staging = app.create_environment(tenant.workspace_id, "staging").await;
    let production = app
        .create_environment(tenant.workspace_id, "production")
        .await;
    let limited = app
        .admin_token(
            &tenant,
            &[Scope::RunnerCommandsSubmit],
            &[tenant.workspace_id],
            &[staging],
        )
        .await;
    let path = routes::runner_commands(tenant.workspace_id);
    for body in [
        json!({"poolId": pool, "command": "echo"}),
        json!({"poolId": pool, "command": "echo", "environmentId": production}),
    ] {
        app.post_json(&path, &limited, &body)
            .expect(403, "forbidden")
            .await;
    }
    let body = json!({"poolId": pool, "command": "echo", "environmentId": staging});
    app.post_json(&path, &limited, &body).ok_response().await;
}

#[tokio::test]
async fn a_token_limited_to_environments_cannot_cancel_commands_outside_them() {
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let staging = app.create_environment(ws, "staging").await;
    let production = app.create_environment(ws, "production").await;
    let limited = Tenant {
        token: app
            .admin_token(&tenant, &[Scope::RunnerPoolsDelete], &[ws], &[staging])
            .await,
        ..tenant.clone()
    };

    // A pool with an open command of another environment, or of none: refused, force or not,
    // and nothing is cancelled or deleted.
    for environment in [Some(production), None] {
        let pool = create_pool(&app, ws, &format!("mixed-{}", Uuid::new_v4().simple())).await;
        let inside = submitted_in(&app, &tenant, pool, Some(staging)).await;
        let outside = submitted_in(&app, &tenant, pool, environment).await;
        for body in [json!({"force": true, "reason": "cleanup"}), json!({})] {
            let response = delete_pool(&app, &limited, pool, &body).await;
            let err = assert_api_error(response, 403, "forbidden").await;
            assert_eq!(err["error"]["details"]["openCommandsOutside"], 1, "{err}");
        }
        assert_eq!(command_status_of(&app, inside).await, "queued");
        assert_eq!(command_status_of(&app, outside).await, "queued");
        let deleted = sql_value!(
            app,
            i64,
            "SELECT count(*) FROM runner_pools WHERE id = $1 AND deleted_at IS NOT NULL",
            pool
        );
        assert_eq!(deleted, 0, "the pool is still live");

        // An unlimited token may.
        let response = delete_pool(&app, &tenant, pool, &json!({"force": true})).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["cancelledCommands"], 2);
    }
    assert_eq!(events_of(&app, "runner_pool.deleted").await, 2);

    // Within its environments: as for anyone (busy without force, cancelled with it).
    let pool = create_pool(&app, ws, "staging-only").await;
    let inside = submitted_in(&app, &tenant, pool, Some(staging)).await;
    let response = delete_pool(&app, &limited, pool, &json!({})).await;
    assert_api_error(response, 409, "pool_busy").await;
    let response = delete_pool(&app, &limited, pool, &json!({"force": true})).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["cancelledCommands"], 1);
    assert_eq!(command_status_of(&app, inside).await, "cancelled");

    // A finished command outside does not count: only open ones are cancelled.
    let pool = create_pool(&app, ws, "finished-outside").await;
    let done = submitted_in(&app, &tenant, pool, Some(production)).await;
    crate::support::sql_exec!(
        &mut app.db().await,
        "UPDATE runner_commands SET status = 'succeeded' WHERE id = $1",
        done
    )
    .unwrap();
    let response = delete_pool(&app, &limited, pool, &json!({})).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn another_workspaces_or_organisations_pool_is_a_404_like_an_unknown_one() {
    let (app, tenant) = tenant_app().await;
    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let near = create_pool(&app, second, "near").await;
    let elsewhere = app.bootstrap().await;
    let far = create_pool(&app, elsewhere.workspace_id, "far").await;

    let unknown = error_shape(delete_pool(&app, &tenant, Uuid::new_v4(), &json!({})).await).await;
    assert_eq!(unknown["status"], 404, "{unknown}");
    for pool in [near, far] {
        for body in [json!({}), json!({"force": true})] {
            let response = delete_pool(&app, &tenant, pool, &body).await;
            assert_eq!(error_shape(response).await, unknown, "{pool}");
        }
    }
    let deleted = sql_value!(
        app,
        i64,
        "SELECT count(*) FROM runner_pools WHERE deleted_at IS NOT NULL"
    );
    assert_eq!(deleted, 0);
}

#[tokio::test]
async fn deletion_and_submission_are_audited_without_argument_values() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "audited").await;
    let body: Value = app
        .post_json(
            &routes::runner_commands(tenant.workspace_id),
            &tenant.token,
            &json!({"poolId": pool, "command": "login", "args": ["--password=hunter2-secret"]}),
        )
        .header("x-correlation-id", "submit-audit-1")
        .ok()
        .await;
    let command_id = body["command"]["id"].as_str().unwrap().to_owned();
    let delivery_id = body["command"]["deliveryId"].as_str().unwrap().to_owned();
    app.delete_json(
        &routes::runner_pool(tenant.workspace_id, pool),
        &tenant.token,
        &json!({"reason": "end of project", "force": true}),
    )
    .header("x-correlation-id", "delete-audit-1")
    .ok_response()
    .await;

    let page: Value = app.activity(&tenant, "?limit=100").await;
    let items = page["items"].as_array().expect("items");
    let find = |kind: &str| {
        items
            .iter()
            .find(|i| i["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {page}"))
            .clone()
    };
    let deleted = find("runner_pool.deleted");
    let submission = find("runner_command.submitted");
    // Newest first: the deletion came after the submission.
    assert!(deleted["sequence"].as_i64().unwrap() > submission["sequence"].as_i64().unwrap());

    assert_eq!(submission["correlationId"], "submit-audit-1");
    assert_eq!(submission["actor"]["kind"], "user");
    assert_eq!(submission["actor"]["id"], tenant.user_id.to_string());
    assert_eq!(submission["target"]["kind"], "runner_command");
    assert_eq!(submission["target"]["id"], command_id);
    assert_eq!(submission["data"]["poolId"], pool.to_string());
    // The command line's length and SHA-256, never its text (docs/decisions.md).
    assert!(submission["data"].get("command").is_none(), "{submission}");
    assert_eq!(submission["data"]["commandBytes"], 5);
    assert_eq!(
        submission["data"]["commandSha256"],
        control_plane::domain::text_digest("login").1
    );
    assert_eq!(submission["data"]["argCount"], 1);
    assert_eq!(submission["data"]["deliveryId"], delivery_id);
    assert!(
        !page.to_string().contains("hunter2"),
        "argument values stay out of the audit log: {page}"
    );

    assert_eq!(deleted["correlationId"], "delete-audit-1");
    assert_eq!(deleted["actor"]["id"], tenant.user_id.to_string());
    assert_eq!(deleted["target"]["kind"], "runner_pool");
    assert_eq!(deleted["target"]["id"], pool.to_string());
    assert_eq!(deleted["data"]["reason"], "end of project");
    assert_eq!(deleted["data"]["force"], true);
    assert_eq!(deleted["data"]["cancelledCommands"], 1);

    // A refused deletion writes no event.
    let busy = create_pool(&app, tenant.workspace_id, "busy").await;
    submitted(&app, &tenant, busy).await;
    let before = events_of(&app, "runner_pool.deleted").await;
    let response = delete_pool(&app, &tenant, busy, &json!({})).await;
    assert_api_error(response, 409, "pool_busy").await;
    assert_eq!(events_of(&app, "runner_pool.deleted").await, before);
}

#[tokio::test]
async fn submission_and_deletion_replay_under_their_idempotency_keys() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "keyed").await;
    let submit_keyed = || {
        app.post_json(
            &routes::runner_commands(tenant.workspace_id),
            &tenant.token,
            &json!({"poolId": pool, "command": "echo"}),
        )
        .header("idempotency-key", "submit-key-0000000001")
        .send()
    };
    let first = submit_keyed().await.unwrap();
    assert_eq!(first.status(), 200);
    let first_body = first.text().await.unwrap();
    let again = submit_keyed().await.unwrap();
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    assert_eq!(again.text().await.unwrap(), first_body);
    assert_eq!(events_of(&app, "runner_command.submitted").await, 1);

    let idle = create_pool(&app, tenant.workspace_id, "idle").await;
    let delete_keyed = || {
        app.delete_json(
            &routes::runner_pool(tenant.workspace_id, idle),
            &tenant.token,
            &json!({}),
        )
        .header("idempotency-key", "delete-key-0000000001")
        .send()
    };
    assert_eq!(delete_keyed().await.unwrap().status(), 200);
    let again = delete_keyed().await.unwrap();
    assert_eq!(again.status(), 200, "a replay, not a second deletion");
    assert_eq!(again.headers()["idempotency-replayed"], "true");
}

async fn delete_pool(
    app: &TestApp,
    tenant: &Tenant,
    pool: Uuid,
    body: &Value,
) -> reqwest::Response {
    app.delete_json(
        &routes::runner_pool(tenant.workspace_id, pool),
        &tenant.token,
        body,
    )
    .response()
    .await
}

async fn submit(app: &TestApp, tenant: &Tenant, body: &Value) -> reqwest::Response {
    app.post_json(
        &routes::runner_commands(tenant.workspace_id),
        &tenant.token,
        body,
    )
    .response()
    .await
}

/// Submits `echo` to `pool` in `environment`; returns the command's id.
async fn submitted_in(
    app: &TestApp,
    tenant: &Tenant,
    pool: Uuid,
    environment: Option<Uuid>,
) -> Uuid {
    let mut body = json!({"poolId": pool, "command": "echo"});
    if let Some(environment) = environment {
        body["environmentId"] = json!(environment);
    }
    let response = submit(app, tenant, &body).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["command"]["id"].as_str().unwrap().parse().unwrap()
}

/// Submits `echo` to `pool`; returns the command's id.
async fn submitted(app: &TestApp, tenant: &Tenant, pool: Uuid) -> Uuid {
    let response = submit(app, tenant, &json!({"poolId": pool, "command": "echo"})).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["command"]["id"].as_str().unwrap().parse().unwrap()
}

fn args(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("arg-{i}")).collect()
}

async fn events_of(app: &TestApp, event_type: &str) -> i64 {
    sql_value!(
        app,
        i64,
        "SELECT count(*) FROM audit_events WHERE event_type = $1",
        event_type
    )
}
