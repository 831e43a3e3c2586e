//! Issue 26's tenant defences: a keyed replay re-checks authorization; environment-limited
//! tokens read only their environments' events, and no event carries a command's text.

use control_plane::domain::{CorrelationId, RevocationReason, Scope};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Call, TestApp, assert_api_error, create_pool, routes, tenant_app};

/// The token id behind a secret, as authentication resolves it.
async fn token_id(app: &TestApp, secret: &str) -> Uuid {
    app.services.authenticate(secret).await.unwrap().token_id
}

#[tokio::test]
async fn a_keyed_replay_is_refused_once_the_grant_it_needed_is_revoked() {
    let (app, tenant) = tenant_app().await;
    let second = app.create_workspace(tenant.organisation_id, "second").await;
    let parent = app
        .admin_token(
            &tenant,
            &[Scope::TokensIssue, Scope::ActivityRead],
            &[tenant.workspace_id, second],
            &[],
        )
        .await;
    let child_of = |workspace: Uuid| {
        json!({
            "name": format!("child-{}", Uuid::new_v4().simple()),
            "scopes": ["activity:read"],
            "organisationId": tenant.organisation_id,
            "workspaceIds": [workspace],
        })
    };
    let issue = |body: &Value, key: &str| {
        app.post_json(routes::ISSUE_TOKEN, &parent, body)
            .header("idempotency-key", key)
            .send()
    };
    let on_second = child_of(second);
    let on_main = child_of(tenant.workspace_id);
    let first = issue(&on_second, "replay-authz-second-0001").await.unwrap();
    assert_eq!(first.status(), 200);
    let secret = first.json::<Value>().await.unwrap()["credential"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let kept = issue(&on_main, "replay-authz-main-000001").await.unwrap();
    assert_eq!(kept.status(), 200);
    let kept_secret = kept.json::<Value>().await.unwrap()["credential"]["token"].clone();

    // The parent loses the second workspace; it keeps the first.
    app.services
        .revoke_token_access_as_admin(
            Some(second),
            token_id(&app, &parent).await,
            RevocationReason::parse("rotated").unwrap(),
            false,
            &CorrelationId::generate(),
        )
        .await
        .unwrap();

    // A fresh request is refused, and so is the keyed repeat: the same 403, not the secret.
    let fresh = app.issue(&parent, &child_of(second)).await;
    let fresh = assert_api_error(fresh, 403, "forbidden").await;
    let replay = issue(&on_second, "replay-authz-second-0001").await.unwrap();
    assert!(replay.headers().get("idempotency-replayed").is_none());
    let refused = assert_api_error(replay, 403, "forbidden").await;
    assert_eq!(refused["error"]["details"], fresh["error"]["details"]);
    assert!(!refused.to_string().contains(&secret), "{refused}");

    // What the caller may still do is still replayed, with the same secret.
    let replay = issue(&on_main, "replay-authz-main-000001").await.unwrap();
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(
        replay.json::<Value>().await.unwrap()["credential"]["token"],
        kept_secret
    );
}

#[tokio::test]
async fn a_keyed_replay_is_refused_when_the_policy_now_denies_it() {
    let (app, tenant) = tenant_app().await;
    let pool = create_pool(&app, tenant.workspace_id, "replayed").await;
    let path = routes::runner_commands(tenant.workspace_id);
    let body = json!({"poolId": pool, "command": "echo"});
    let submit = || {
        app.post_json(&path, &tenant.token, &body)
            .header("idempotency-key", "replay-authz-policy-0001")
            .send()
    };
    assert_eq!(submit().await.unwrap().status(), 200);
    crate::support::activate_deny_all(&app.services).await;
    // The activation reaches the server through its change feed: wait until a fresh request
    // is refused.
    let activity = routes::activity(tenant.workspace_id);
    let refused = || async {
        let response = app.get(&activity, &tenant.token).response().await;
        response.status() == 403
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !refused().await {
        assert!(std::time::Instant::now() < deadline, "never applied");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let replay = submit().await.unwrap();
    assert!(replay.headers().get("idempotency-replayed").is_none());
    assert_eq!(replay.status(), 403);
}

/// Submits a command and returns its id.
async fn submit(app: &TestApp, token: &str, workspace: Uuid, body: &Value) -> String {
    let path = routes::runner_commands(workspace);
    let body: Value = app.post_ok(&path, token, body).await;
    body["command"]["id"].as_str().unwrap().to_owned()
}

/// Every activity item `token` reads, following the cursor with pages of `limit`.
async fn all_activity(app: &TestApp, token: &str, workspace: Uuid, limit: u32) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = format!(
            "{}?limit={limit}&cursor={cursor}",
            routes::activity(workspace)
        );
        let page: Value = app.get_ok(&path, token).await;
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => return items,
        }
    }
}

fn targets(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|i| i["target"]["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_staging_token_reads_no_production_event_and_no_event_holds_a_command_line() {
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let pool = create_pool(&app, ws, "deployers").await;
    let staging = app.create_environment(ws, "staging").await;
    let production = app.create_environment(ws, "production").await;
    let line = "deploy --db-password=hunter2";
    let production_command = submit(
        &app,
        &tenant.token,
        ws,
        &json!({"poolId": pool, "command": line, "args": ["--token=s3cr3t-arg"],
                "environmentId": production}),
    )
    .await;
    let staging_command = submit(
        &app,
        &tenant.token,
        ws,
        &json!({"poolId": pool, "command": "deploy", "environmentId": staging}),
    )
    .await;
    let unplaced_command = submit(
        &app,
        &tenant.token,
        ws,
        &json!({"poolId": pool, "command": "deploy"}),
    )
    .await;
    let reader = app
        .admin_token(
            &tenant,
            &[Scope::ActivityRead, Scope::AuditRead],
            &[ws],
            &[staging],
        )
        .await;

    // The unlimited token reads all three submissions; no event holds the line or an argument.
    let everything = all_activity(&app, &tenant.token, ws, 100).await;
    let seen = targets(&everything);
    for command in [&production_command, &staging_command, &unplaced_command] {
        assert!(seen.contains(command), "{command} in {everything:?}");
    }
    let text = serde_json::to_string(&everything).unwrap();
    assert!(
        !text.contains("hunter2") && !text.contains("s3cr3t"),
        "{text}"
    );
    let submitted = everything
        .iter()
        .find(|i| i["target"]["id"] == production_command.as_str())
        .unwrap();
    let (bytes, digest) = control_plane::domain::text_digest(line);
    assert_eq!(submitted["data"]["commandBytes"], bytes);
    assert_eq!(submitted["data"]["commandSha256"], digest);

    // The staging token: its command and the workspace's own events, page after page, and
    // neither the production command nor the one sent to no environment.
    for limit in [1, 100] {
        let items = all_activity(&app, &reader, ws, limit).await;
        let seen = targets(&items);
        assert!(seen.contains(&staging_command), "{items:?}");
        assert!(!seen.contains(&production_command), "{items:?}");
        assert!(!seen.contains(&unplaced_command), "{items:?}");
        assert!(items.iter().any(|i| i["type"] == "runner_pool.created"));
    }

    // The stream skips them too, in the replay and live.
    let mut stream = crate::support::sse::Sse::open(
        &app,
        &reader,
        ws,
        "?after=0&types=runner_command.submitted",
        None,
    )
    .await;
    stream.expect_preamble().await;
    let event = stream.next_event().await;
    assert_eq!(event.data["target"]["id"], staging_command.as_str());
    submit(
        &app,
        &tenant.token,
        ws,
        &json!({"poolId": pool, "command": "deploy", "environmentId": production}),
    )
    .await;
    let live = submit(
        &app,
        &tenant.token,
        ws,
        &json!({"poolId": pool, "command": "deploy", "environmentId": staging}),
    )
    .await;
    let event = stream.next_event().await;
    assert_eq!(event.data["target"]["id"], live.as_str());
}

#[tokio::test]
async fn a_requester_approves_its_own_revision_only_where_its_organisation_allows_it() {
    use control_plane::domain::RevisionState;
    use control_plane::service::ServiceError;
    use control_plane::storage::WriteContext;
    let (app, tenant) = tenant_app().await;
    let ws = tenant.workspace_id;
    let requester = app.services.get_user(tenant.user_id).await.unwrap();
    let write = || WriteContext::admin(&CorrelationId::generate());
    let decide = |revision: Uuid, to: RevisionState| {
        let services = app.services.clone();
        let requester = requester.clone();
        async move {
            services
                .decide_revision(revision, to, &requester, "mine", &write())
                .await
        }
    };
    let mut pending = Vec::new();
    for name in ["refused", "withdrawn", "allowed"] {
        let (workflow, revision) = crate::workflows::draft(&app, ws, name).await;
        let response = crate::workflows::request_approval(
            &app,
            &tenant.token,
            ws,
            workflow,
            revision,
            &json!({}),
        )
        .await;
        assert_eq!(response.status(), 200);
        pending.push(revision);
    }

    // Refused by default, changing nothing; withdrawing one's own request is allowed.
    let refused = decide(pending[0], RevisionState::Approved).await;
    assert!(
        matches!(refused, Err(ServiceError::Forbidden { .. })),
        "{refused:?}"
    );
    let rejected = decide(pending[1], RevisionState::Rejected).await.unwrap();
    assert_eq!(rejected.state, RevisionState::Rejected);

    // The organisation allows it: the approval goes through, and its event says how.
    app.services
        .set_self_approval(tenant.organisation_id, true, &write())
        .await
        .unwrap();
    let approved = decide(pending[2], RevisionState::Approved).await.unwrap();
    assert_eq!(approved.state, RevisionState::Approved);
    let page: Value = app
        .get(
            &format!("{}?limit=100", routes::activity(ws)),
            &tenant.token,
        )
        .json_body()
        .await;
    let event = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "workflow_revision.approved")
        .unwrap()
        .clone();
    assert_eq!(event["target"]["id"], pending[2].to_string());
    assert_eq!(event["data"]["selfApproval"], true);
    assert_eq!(event["data"]["requestedBy"], tenant.user_id.to_string());

    // Refused again once the organisation withdraws the allowance.
    app.services
        .set_self_approval(tenant.organisation_id, false, &write())
        .await
        .unwrap();
    let (workflow, revision) = crate::workflows::draft(&app, ws, "again").await;
    let response =
        crate::workflows::request_approval(&app, &tenant.token, ws, workflow, revision, &json!({}))
            .await;
    assert_eq!(response.status(), 200);
    let refused = decide(revision, RevisionState::Approved).await;
    assert!(
        matches!(refused, Err(ServiceError::Forbidden { .. })),
        "{refused:?}"
    );
}
