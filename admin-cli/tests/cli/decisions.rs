//! Decisions an operator takes from the CLI: showing a token's issuer and revoking a token with
//! every descendant, and approving or rejecting a workflow revision as the token's user.

use super::*;

/// `tokens show` and `tokens list` name the issuing token; `tokens revoke --cascade` revokes the
/// whole token and every descendant, grandchildren included, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_show_their_issuer_and_a_cascade_revokes_every_descendant() {
    let db = Db::new().await;
    let server = served(&db).await;
    let org = stdout(&server.run("orgs create initech")).trim().to_owned();
    let run = |line: &str| server.run(&format!("{line} --org {org}"));
    let ws = stdout(&run("workspaces create prod")).trim().to_owned();
    let user = stdout(&run("users create ops@initech.test"))
        .trim()
        .to_owned();
    let issue = |name: &str| {
        let out = run(&format!(
            "tokens issue --user {user} --name {name} --scope tokens:issue --workspace {ws} -o json"
        ));
        json_of(&out)["id"].as_str().unwrap().to_owned()
    };
    let (root, child, grandchild, other) = (
        issue("root"),
        issue("child"),
        issue("grandchild"),
        issue("other"),
    );
    // An administrator's issuance has no issuer; the lineage a token-issued chain would record:
    let mut conn = db.conn().await;
    for (id, parent) in [(&child, &root), (&grandchild, &child)] {
        let changed = sql_exec!(
            &mut conn,
            "UPDATE tokens SET issued_by_token_id = $1 WHERE id = $2",
            uuid::Uuid::parse_str(parent).unwrap(),
            uuid::Uuid::parse_str(id).unwrap(),
        );
        assert_eq!(changed, 1);
    }

    let shown = json_of(&run(&format!("tokens show --id {child} -o json")));
    assert_eq!(shown["id"], child.as_str());
    assert_eq!(shown["issuedByTokenId"], root.as_str());
    let table = stdout(&run(&format!("tokens show --id {child}")));
    assert!(
        table.contains("ISSUED BY") && table.contains(&root),
        "{table}"
    );
    let list = json_of(&run("tokens list -o json"));
    let issuer_of = |id: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap()["issuedByTokenId"]
            .clone()
    };
    assert_eq!(issuer_of(&root), Value::Null);
    assert_eq!(issuer_of(&grandchild), child.as_str());
    let unknown = failure(&run(&format!("tokens show --id {}", uuid::Uuid::new_v4())));
    assert!(unknown.contains("not_found"), "{unknown}");
    // Another organisation's token is as unknown as a token that does not exist.
    let elsewhere = failure(&server.run(&format!("tokens show --id {child}")));
    assert!(elsewhere.contains("not_found"), "{elsewhere}");

    // Neither a workspace nor --cascade: refused before anything runs.
    let refused = run(&format!("tokens revoke --token {root} --reason x"));
    assert!(!refused.status.success());

    let revoked = json_of(&run(&format!(
        "tokens revoke --token {root} --reason leaked --cascade -o json"
    )));
    assert_eq!(revoked["tokenRevoked"], true);
    assert_eq!(revoked["descendantsRevoked"], 2);
    for id in [&root, &child, &grandchild] {
        let shown = json_of(&run(&format!("tokens show --id {id} -o json")));
        assert!(is_api_time(shown["revokedAt"].as_str().unwrap()), "{shown}");
        assert_eq!(shown["workspaceIds"], serde_json::json!([]));
    }
    let shown = json_of(&run(&format!("tokens show --id {other} -o json")));
    assert_eq!(shown["revokedAt"], Value::Null);
    let (events,) = sql_one!(
        &mut conn,
        (i64,),
        "SELECT count(*) FROM audit_events WHERE event_type = 'token.workspace_access_revoked'",
    );
    assert_eq!(events, 3, "one event per revoked grant");
}

/// A token of a new user of `org` in `role`, with `scopes` on `workspace`, issued over HTTP by
/// the bootstrap's operator: (user id, token).
fn user_token(
    server: &Served,
    org: &str,
    workspace: &str,
    role: &str,
    scopes: &[&str],
) -> (String, String) {
    let user = json_of(&server.run(&format!(
        "users create --org {org} --role {role} {role}-{}@example.test -o json",
        uuid::Uuid::new_v4().simple()
    )));
    let user = user["id"].as_str().unwrap().to_owned();
    let scopes: String = scopes.iter().map(|s| format!(" --scope {s}")).collect();
    let issued = json_of(&server.run(&format!(
        "tokens issue --org {org} --user {user} --name t{scopes} --workspace {workspace} -o json"
    )));
    (user, issued["token"].as_str().unwrap().to_owned())
}

/// `workflows revisions approve|reject`: the calling token's user, an administrator of the
/// revision's organisation, decides a pending revision once; a second decision is
/// `invalid_transition`; a member, another organisation's admin and an unknown revision are
/// refused and change nothing; each decision is audited with the user and token that made it;
/// its own requester approves only once an operator allows it, which no admin can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_are_approved_or_rejected_once_by_an_administrator() {
    let db = Db::new().await;
    let server = served(&db).await;
    let (ws, org) = (server.workspace.clone(), server.org.clone());
    let operator = server.user.clone();

    let (member, member_token) = user_token(&server, &org, &ws, "member", &["activity:read"]);
    let admin_scopes = ["admin:read", "admin:write"];
    let (admin, admin_token) = user_token(&server, &org, &ws, "admin", &admin_scopes);
    let other_org = stdout(&server.run("orgs create initech")).trim().to_owned();
    let other_ws = stdout(&server.run(&format!("workspaces create --org {other_org} ops")))
        .trim()
        .to_owned();
    let (_, outsider) = user_token(&server, &other_org, &other_ws, "admin", &admin_scopes);

    let wf =
        json_of(&server.run(&format!("workflows create --workspace {ws} deploy -o json")))["id"]
            .as_str()
            .unwrap()
            .to_owned();
    let revision = || {
        json_of(&server.run(&format!(
            "workflows revisions create --workflow {wf} -o json"
        )))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (r1, r2) = (revision(), revision());
    let decide_as = |token: &str, verb: &str, revision: &str| {
        server.cpctl_as(
            token,
            &[
                "workflows",
                "revisions",
                verb,
                "--workflow",
                &wf,
                "--revision",
                revision,
                "--reason",
                "checked the plan",
                "-o",
                "json",
            ],
        )
    };
    let decide = |verb: &str, revision: &str| decide_as(&server.token, verb, revision);

    // A draft has not been sent for approval: nothing to decide.
    let err = failure(&decide("approve", &r1));
    assert!(err.contains("invalid_transition"), "{err}");
    // Requested by the member: an administrator decides someone else's request.
    pending(&db, &r1, &member).await;
    pending(&db, &r2, &member).await;

    // Approved by the operator whose token cpctl holds.
    let approved = json_of(&decide("approve", &r1));
    assert_eq!(approved["state"], "approved", "{approved}");
    assert_eq!(approved["decidedBy"], operator.as_str());
    assert_eq!(approved["decisionReason"], "checked the plan");
    assert!(is_api_time(approved["decidedAt"].as_str().unwrap()));

    // A second decision, either way and by anyone, is the state machine's conflict.
    for verb in ["reject", "approve"] {
        let err = failure(&decide_as(&admin_token, verb, &r1));
        assert!(err.contains("invalid_transition"), "{err}");
        assert!(err.contains("approved"), "{err}");
    }

    // Refused, changing nothing: a member, another organisation's admin (in its own
    // organisation or this one), an unknown revision, an empty reason.
    let err = failure(&decide_as(&member_token, "approve", &r2));
    assert!(err.contains("forbidden"), "{err}");
    let err = failure(&decide_as(&outsider, "approve", &r2));
    assert!(err.contains("not_found"), "{err}");
    let err = failure(&server.cpctl_as(
        &outsider,
        &[
            "workflows",
            "revisions",
            "approve",
            "--workflow",
            &wf,
            "--revision",
            &r2,
            "--reason",
            "x",
            "--org",
            &org,
        ],
    ));
    assert!(err.contains("not_found"), "{err}");
    let err = failure(&decide("approve", &uuid::Uuid::new_v4().to_string()));
    assert!(err.contains("no such revision"), "{err}");
    let empty = server.cpctl(&[
        "workflows",
        "revisions",
        "reject",
        "--workflow",
        &wf,
        "--revision",
        &r2,
        "--reason",
        "",
    ]);
    failure(&empty);
    // The decider is the token's: there is no flag to name another.
    let named = server.cpctl(&[
        "workflows",
        "revisions",
        "reject",
        "--workflow",
        &wf,
        "--revision",
        &r2,
        "--reason",
        "x",
        "--actor",
        &admin,
    ]);
    assert!(!named.status.success());

    // Rejected by the organisation's admin.
    let rejected = json_of(&decide_as(&admin_token, "reject", &r2));
    assert_eq!(rejected["state"], "rejected", "{rejected}");
    assert_eq!(rejected["decidedBy"], admin.as_str());

    // One event per decision, in the workspace's log, naming the deciding user and its token.
    let mut conn = db.conn().await;
    let events = sql_all!(
        &mut conn,
        (
            String,
            uuid::Uuid,
            String,
            Option<uuid::Uuid>,
            Option<uuid::Uuid>,
            String
        ),
        "SELECT event_type, target_id, actor_kind, actor_id, actor_token_id, CAST(data AS TEXT)
         FROM audit_events
         WHERE event_type IN ('workflow_revision.approved', 'workflow_revision.rejected')
         ORDER BY seq",
    );
    assert_eq!(events.len(), 2, "{events:?}");
    let uuid = |s: &str| s.parse::<uuid::Uuid>().unwrap();
    assert_eq!(events[0].0, "workflow_revision.approved");
    assert_eq!(events[0].1, uuid(&r1));
    assert_eq!(
        (events[0].3, events[0].4),
        (Some(uuid(&operator)), Some(uuid(&server.token_id)))
    );
    assert_eq!(events[1].0, "workflow_revision.rejected");
    assert_eq!(events[1].1, uuid(&r2));
    assert_eq!(events[1].3, Some(uuid(&admin)));
    for (_, _, kind, _, token, data) in &events {
        assert_eq!(kind, "user");
        assert!(token.is_some());
        let data = json(data);
        assert_eq!(data["from"], "pending_approval");
        assert_eq!(data["selfApproval"], false);
    }

    // Its own requester may not approve a revision, until an operator allows it; an admin
    // cannot lift the rule that constrains it.
    let r3 = revision();
    pending(&db, &r3, &admin).await;
    let err = failure(&decide_as(&admin_token, "approve", &r3));
    assert!(err.contains("requested this revision"), "{err}");
    let err = failure(&server.cpctl_as(&admin_token, &["orgs", "self-approval", "allow"]));
    assert!(err.contains("forbidden"), "{err}");
    let allowed = json_of(&server.run(&format!("orgs self-approval --org {org} allow -o json")));
    assert_eq!(allowed["selfApproval"], true);
    assert_eq!(allowed["organisationId"], org.as_str());
    let approved = json_of(&decide_as(&admin_token, "approve", &r3));
    assert_eq!(approved["state"], "approved", "{approved}");
    let (data,) = sql_one!(
        &mut conn,
        (String,),
        "SELECT CAST(data AS TEXT) FROM audit_events
         WHERE event_type = 'workflow_revision.approved' AND target_id = $1",
        uuid(&r3),
    );
    assert_eq!(json(&data)["selfApproval"], true, "{data}");
    let table = stdout(&server.run("orgs self-approval refuse"));
    assert_eq!(
        table.trim(),
        format!("self-approval refused in organisation {org}")
    );
}
