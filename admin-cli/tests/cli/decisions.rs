//! Decisions an operator takes from the CLI: showing a token's issuer and revoking a token with
//! every descendant, and approving or rejecting a workflow revision as an administrator.

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

/// `workflows revisions approve|reject`: an administrator of the revision's organisation,
/// named by email, by id or by `CP_ACTOR`, decides a pending revision once; a second decision
/// is `invalid_transition`; a non-administrator, a user of another organisation and an unknown
/// revision are refused and change nothing; each decision is audited with its actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_are_approved_or_rejected_once_by_an_administrator() {
    let db = Db::new().await;
    let server = served(&db).await;
    let (ws, org) = (server.workspace.clone(), server.org.clone());
    let admin = server.user.clone();

    // Bootstrap's user is the operator; a plain user is a member, unless created --role admin.
    let member = json_of(&server.run(&format!(
        "users create --org {org} member@acme.test -o json"
    )));
    assert_eq!(member["role"], "member");
    let users = json_of(&server.run(&format!("users list --org {org} -o json")));
    let admin_row = users
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["id"] == admin.as_str())
        .unwrap();
    assert_eq!(admin_row["role"], "operator");
    let other_org = stdout(&server.run("orgs create initech")).trim().to_owned();
    let outsider = json_of(&server.run(&format!(
        "users create --org {other_org} --role admin boss@initech.test -o json"
    )));
    assert_eq!(outsider["role"], "admin");
    assert_eq!(outsider["organisationId"], other_org.as_str());

    let wf = json_of(&db.run(&format!("workflows create --workspace {ws} deploy -o json")))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let revision = |db: &Db| {
        json_of(&db.run(&format!(
            "workflows revisions create --workflow {wf} -o json"
        )))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (r1, r2) = (revision(&db), revision(&db));
    let decide = |verb: &str, revision: &str, actor: &str| {
        db.cpctl(&[
            "workflows",
            "revisions",
            verb,
            "--revision",
            revision,
            "--reason",
            "checked the plan",
            "--actor",
            actor,
            "-o",
            "json",
        ])
    };

    // A draft has not been sent for approval: nothing to decide.
    let err = failure(&decide("approve", &r1, "ops@acme.test"));
    assert!(err.contains("invalid_transition"), "{err}");
    // Requested by the member: the administrator decides someone else's request.
    let member_id = member["id"].as_str().unwrap().to_owned();
    pending(&db, &r1, &member_id).await;
    pending(&db, &r2, &member_id).await;

    // Approved by an administrator named by email.
    let approved = json_of(&decide("approve", &r1, "ops@acme.test"));
    assert_eq!(approved["state"], "approved", "{approved}");
    assert_eq!(approved["decidedBy"], admin.as_str());
    assert_eq!(approved["decisionReason"], "checked the plan");
    assert!(is_api_time(approved["decidedAt"].as_str().unwrap()));

    // A second decision, either way and by anyone, is the state machine's conflict.
    for verb in ["reject", "approve"] {
        let err = failure(&decide(verb, &r1, &admin));
        assert!(err.contains("invalid_transition"), "{err}");
        assert!(err.contains("approved"), "{err}");
    }

    // Refused, changing nothing: a user who is not an administrator, an administrator of
    // another organisation, an unknown user, an unknown revision, an empty reason.
    let err = failure(&decide("approve", &r2, "member@acme.test"));
    assert!(err.contains("not an administrator"), "{err}");
    let err = failure(&decide("approve", &r2, outsider["id"].as_str().unwrap()));
    assert!(err.contains("no such user"), "{err}");
    let err = failure(&decide("approve", &r2, "nobody@acme.test"));
    assert!(err.contains("no such user"), "{err}");
    let err = failure(&decide(
        "approve",
        &uuid::Uuid::new_v4().to_string(),
        &admin,
    ));
    assert!(err.contains("no such workflow revision"), "{err}");
    let empty = db.cpctl(&[
        "workflows",
        "revisions",
        "reject",
        "--revision",
        &r2,
        "--reason",
        "",
        "--actor",
        &admin,
    ]);
    failure(&empty);

    // Rejected by the administrator CP_ACTOR names.
    let rejected = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args([
            "workflows",
            "revisions",
            "reject",
            "--revision",
            &r2,
            "--reason",
            "not now",
            "-o",
            "json",
        ])
        .env("DATABASE_URL", &db.url)
        .env("CP_ACTOR", &admin)
        .env_remove("CP_TOKEN_HASH_KEY")
        .output()
        .unwrap();
    let rejected = json_of(&rejected);
    assert_eq!(rejected["state"], "rejected", "{rejected}");
    assert_eq!(rejected["decisionReason"], "not now");

    // One event per decision, in the workspace's log, with the deciding user as the actor.
    let mut conn = db.conn().await;
    let events = sql_all!(
        &mut conn,
        (String, uuid::Uuid, String, Option<uuid::Uuid>, String),
        "SELECT event_type, target_id, actor_kind, actor_id, CAST(data AS TEXT) FROM audit_events
         WHERE event_type IN ('workflow_revision.approved', 'workflow_revision.rejected')
         ORDER BY seq",
    );
    let events: Vec<_> = events
        .into_iter()
        .map(|(t, target, kind, id, data)| (t, target, kind, id, json(&data)))
        .collect();
    let admin_id: uuid::Uuid = admin.parse().unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].0, "workflow_revision.approved");
    assert_eq!(events[0].1.to_string(), r1);
    assert_eq!(events[1].0, "workflow_revision.rejected");
    assert_eq!(events[1].1.to_string(), r2);
    for (_, _, kind, id, data) in &events {
        assert_eq!(kind, "user");
        assert_eq!(*id, Some(admin_id));
        assert_eq!(data["from"], "pending_approval");
        // The actor was named to cpctl, not authenticated: the event says so.
        assert_eq!(data["via"], "cpctl");
        assert_eq!(data["selfApproval"], false);
    }
    assert_eq!(events[1].4["reason"], "not now");

    // Its own requester may not approve a revision, until the organisation allows it.
    let r3 = revision(&db);
    pending(&db, &r3, &admin).await;
    let err = failure(&decide("approve", &r3, &admin));
    assert!(err.contains("requested this revision"), "{err}");
    let allowed = json_of(&db.run(&format!("orgs self-approval --org {org} allow -o json")));
    assert_eq!(allowed["selfApproval"], true);
    let approved = json_of(&decide("approve", &r3, &admin));
    assert_eq!(approved["state"], "approved", "{approved}");
    let (data,) = sql_one!(
        &mut conn,
        (String,),
        "SELECT CAST(data AS TEXT) FROM audit_events
         WHERE event_type = 'workflow_revision.approved' AND target_id = $1",
        r3.parse::<uuid::Uuid>().unwrap(),
    );
    let data = json(&data);
    assert_eq!(data["selfApproval"], true, "{data}");
    assert_eq!(data["via"], "cpctl");
}
