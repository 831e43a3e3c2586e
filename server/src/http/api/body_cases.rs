//! What every request body parser accepts and how it rejects: each field's errors, in order,
//! with the offending value where one is echoed. Pinned by a snapshot so a change to a parser
//! (or to the declaration the schema shares with it) cannot alter them unnoticed.

use serde_json::{Value, json};

use super::admin_tokens::Rotation;
use super::audit_admin::{Purge, Retention};
use super::deliveries::{Recover, Resend};
use super::fleet::{
    DeliveryUrl, DisableAction, EnableAction, NewKey, NewPool, NewRunner, RemoveAction,
    RevokeKeyAction, SecretRotation,
};
use super::marketplace_admin::Restore;
use super::organisations::Named;
use super::tokens::RevokeRequest;
use super::users::{Disable, Enable, NewRole, NewUser};
use super::workflow_admin::{Approval, NewRevision, Rejection, SelfApproval};
use super::workflows::ApprovalComment;
use crate::domain::Operation;
use crate::http::payload::FromJson;
use crate::service::{
    AdminRevocation, DeletePoolInput, DeliveryStatusInput, IssueTokenInput, ReportReviewInput,
    ReviewInput, SubmitCommandInput, UserTokenRequest,
};

const ID: &str = "0b7e1f0e-5f1c-4c3e-9a57-3c1f0e9d2a11";

fn outcome<T: FromJson>(body: &Value, show: impl Fn(T) -> String) -> Value {
    let result = match T::from_json(body.clone()) {
        Ok(value) => json!({ "body": body, "ok": show(value) }),
        Err(errors) => json!({ "body": body, "errors": errors.errors() }),
    };
    compact(result)
}

/// Runs of more than 40 equal characters written as `<N × c>`, so the snapshot stays readable.
fn compact(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(compact_runs(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(compact).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, compact(v))).collect())
        }
        other => other,
    }
}

fn compact_runs(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let mut n = 1;
        while chars.peek() == Some(&c) {
            chars.next();
            n += 1;
        }
        if n > 40 {
            out.push_str(&format!("<{n} × {c}>"));
        } else {
            out.extend(std::iter::repeat_n(c, n));
        }
    }
    out
}

/// Bodies that are not objects, and the rules every body shares.
fn shared(cases: &mut Vec<Value>, base: &Value, show: impl Fn(&Value) -> Value) {
    for body in [json!(null), json!([]), json!("x"), json!(1), json!(true)] {
        cases.push(show(&body));
    }
    let mut unknown = base.clone();
    unknown["zeta"] = json!(1);
    unknown["alpha"] = json!(null);
    cases.push(show(&unknown));
}

fn with(base: &Value, field: &str, value: Value) -> Value {
    let mut body = base.clone();
    match value {
        Value::Null if field.starts_with('-') => {
            body.as_object_mut().map(|o| o.remove(&field[1..]));
        }
        value => body[field] = value,
    }
    body
}

fn without(base: &Value, field: &str) -> Value {
    with(base, &format!("-{field}"), Value::Null)
}

fn strings(len: usize) -> Value {
    json!("é".repeat(len))
}

#[test]
fn request_bodies_match_the_snapshot() {
    let mut all = serde_json::Map::new();

    let issue = json!({ "name": "ci", "scopes": ["audit:read"], "organisationId": ID,
        "workspaceIds": [ID] });
    let show = |body: &Value| outcome::<IssueTokenInput>(body, |v| format!("{v:?}"));
    let mut cases = Vec::new();
    shared(&mut cases, &issue, show);
    for body in [
        issue.clone(),
        json!({}),
        with(&issue, "name", json!("")),
        with(&issue, "name", strings(120)),
        with(&issue, "name", strings(121)),
        with(&issue, "name", json!("a\u{0}b")),
        with(&issue, "name", json!(5)),
        with(&issue, "name", json!(null)),
        with(&issue, "scopes", json!([])),
        with(&issue, "scopes", json!("audit:read")),
        with(
            &issue,
            "scopes",
            json!(["audit:read", "nope", 3, "audit:read"]),
        ),
        with(&issue, "organisationId", json!("not-a-uuid")),
        with(&issue, "organisationId", json!(format!("{{{ID}}}"))),
        with(&issue, "workspaceIds", json!([])),
        with(&issue, "workspaceIds", json!([ID, "x", ID])),
        with(&issue, "workspaceIds", json!({})),
        with(&issue, "environmentIds", json!([ID, ID])),
        with(&issue, "environmentIds", json!(["x"])),
        with(&issue, "environmentIds", json!(null)),
        with(&issue, "expiresInDays", json!(0)),
        with(&issue, "expiresInDays", json!(1)),
        with(&issue, "expiresInDays", json!(90)),
        with(&issue, "expiresInDays", json!(91)),
        with(&issue, "expiresInDays", json!(7.0)),
        with(&issue, "expiresInDays", json!(7.5)),
        with(&issue, "expiresInDays", json!("7")),
        with(&issue, "expiresInDays", json!(null)),
        with(&issue, "expiresInDays", json!(1e20)),
        without(&issue, "scopes"),
        json!({ "name": "", "scopes": ["x"], "organisationId": 1, "workspaceIds": [],
            "environmentIds": [1], "expiresInDays": 100, "extra": 1 }),
    ] {
        cases.push(show(&body));
    }
    all.insert("issuePersonalAccessToken".into(), cases.into());

    let revoke = json!({ "reason": "rotated" });
    let show = |body: &Value| outcome::<RevokeRequest>(body, |v| format!("{v:?}"));
    let mut cases = Vec::new();
    shared(&mut cases, &revoke, show);
    for body in [
        revoke.clone(),
        json!({}),
        with(&revoke, "reason", json!("")),
        with(&revoke, "reason", strings(500)),
        with(&revoke, "reason", strings(501)),
        with(&revoke, "reason", json!("\u{0}")),
        with(&revoke, "reason", json!(null)),
        with(&revoke, "reason", json!(["x"])),
        with(&revoke, "cascade", json!(true)),
        with(&revoke, "cascade", json!(false)),
        with(&revoke, "cascade", json!("true")),
        with(&revoke, "cascade", json!(null)),
    ] {
        cases.push(show(&body));
    }
    all.insert("revokeWorkspaceAccessToken".into(), cases.into());

    let delete = json!({ "reason": "gone", "force": true });
    let show = |body: &Value| outcome::<DeletePoolInput>(body, |v| format!("{v:?}"));
    let mut cases = Vec::new();
    shared(&mut cases, &delete, show);
    for body in [
        delete.clone(),
        json!({}),
        with(&delete, "reason", json!("")),
        with(&delete, "reason", strings(500)),
        with(&delete, "reason", strings(501)),
        with(&delete, "reason", json!("a\u{0}")),
        with(&delete, "reason", json!(null)),
        with(&delete, "force", json!("true")),
        with(&delete, "force", json!(null)),
        with(&delete, "force", json!(0)),
    ] {
        cases.push(show(&body));
    }
    all.insert("deleteRunnerPool".into(), cases.into());

    let submit = json!({ "poolId": ID, "command": "deploy" });
    let show = |body: &Value| outcome::<SubmitCommandInput>(body, |v| format!("{v:?}"));
    let mut cases = Vec::new();
    shared(&mut cases, &submit, show);
    for body in [
        submit.clone(),
        json!({}),
        with(&submit, "poolId", json!("x")),
        with(&submit, "command", json!("")),
        with(&submit, "command", strings(200)),
        with(&submit, "command", strings(201)),
        with(&submit, "command", json!(null)),
        with(&submit, "args", json!([])),
        with(&submit, "args", json!(["", "a", "é".repeat(4096)])),
        with(&submit, "args", json!(["é".repeat(4097), 1, "a\u{0}"])),
        with(&submit, "args", json!(vec!["a"; 64])),
        with(&submit, "args", json!(vec!["a"; 65])),
        with(&submit, "args", json!("a")),
        with(&submit, "args", json!(null)),
        with(&submit, "environmentId", json!(ID)),
        with(&submit, "environmentId", json!("x")),
        with(&submit, "environmentId", json!(null)),
        with(&submit, "timeoutSeconds", json!(0)),
        with(&submit, "timeoutSeconds", json!(1)),
        with(&submit, "timeoutSeconds", json!(86_400)),
        with(&submit, "timeoutSeconds", json!(86_401)),
        with(&submit, "timeoutSeconds", json!(-1)),
        with(&submit, "timeoutSeconds", json!(1.5)),
        with(&submit, "timeoutSeconds", json!(u64::MAX)),
        with(&submit, "timeoutSeconds", json!(null)),
        json!({ "poolId": 1, "command": "", "args": [1], "environmentId": 2,
            "timeoutSeconds": 0, "b": 1, "a": 2 }),
    ] {
        cases.push(show(&body));
    }
    all.insert("submitRunnerCommand".into(), cases.into());

    let report = json!({ "status": "received" });
    let show = |body: &Value| outcome::<DeliveryStatusInput>(body, |v| format!("{v:?}"));
    let mut cases = Vec::new();
    shared(&mut cases, &report, show);
    for body in [
        report.clone(),
        json!({}),
        with(&report, "status", json!("pending")),
        with(&report, "status", json!("running")),
        with(&report, "status", json!("succeeded")),
        with(&report, "status", json!("failed")),
        with(&report, "status", json!("Failed")),
        with(&report, "status", json!(1)),
        with(&report, "detail", json!("")),
        with(&report, "detail", strings(2000)),
        with(&report, "detail", strings(2001)),
        with(&report, "detail", json!(null)),
        with(&report, "exitCode", json!(0)),
        with(&report, "exitCode", json!(-2_147_483_648_i64)),
        with(&report, "exitCode", json!(2_147_483_648_i64)),
        with(&report, "exitCode", json!("0")),
        with(&report, "exitCode", json!(null)),
        json!({ "status": "pending", "detail": "", "exitCode": 1.5, "x": 1 }),
    ] {
        cases.push(show(&body));
    }
    all.insert("reportDeliveryStatus".into(), cases.into());

    let approval = json!({ "comment": "please" });
    let show = |body: &Value| outcome::<ApprovalComment>(body, |v| format!("{:?}", v.0));
    let mut cases = Vec::new();
    shared(&mut cases, &approval, show);
    for body in [
        approval.clone(),
        json!({}),
        with(&approval, "comment", json!("")),
        with(&approval, "comment", strings(1000)),
        with(&approval, "comment", strings(1001)),
        with(&approval, "comment", json!(null)),
        with(&approval, "comment", json!(1)),
    ] {
        cases.push(show(&body));
    }
    all.insert("requestWorkflowRevisionApproval".into(), cases.into());

    let review = json!({ "rating": 4, "title": "good", "body": "works" });
    let show = |body: &Value| outcome::<ReviewInput>(body, |v| format!("{v:?}"));
    let mut cases = Vec::new();
    shared(&mut cases, &review, show);
    for body in [
        review.clone(),
        json!({}),
        with(&review, "rating", json!(0)),
        with(&review, "rating", json!(1)),
        with(&review, "rating", json!(5)),
        with(&review, "rating", json!(6)),
        with(&review, "rating", json!(4.0)),
        with(&review, "rating", json!("4")),
        with(&review, "rating", json!(null)),
        with(&review, "title", json!("")),
        with(&review, "title", strings(120)),
        with(&review, "title", strings(121)),
        with(&review, "body", json!("")),
        with(&review, "body", strings(5000)),
        with(&review, "body", strings(5001)),
        with(&review, "body", json!("\u{0}")),
        json!({ "rating": 9, "title": 1, "body": "", "z": 0 }),
    ] {
        cases.push(show(&body));
    }
    all.insert("putOwnPluginReview".into(), cases.into());

    let report = json!({ "reason": "spam" });
    let show = |body: &Value| outcome::<ReportReviewInput>(body, |v| format!("{v:?}"));
    let mut cases = Vec::new();
    shared(&mut cases, &report, show);
    for body in [
        report.clone(),
        json!({}),
        with(&report, "reason", json!("abuse")),
        with(&report, "reason", json!("off_topic")),
        with(&report, "reason", json!("other")),
        with(&report, "reason", json!("rude")),
        with(&report, "reason", json!(null)),
        with(&report, "comment", json!("")),
        with(&report, "comment", strings(1000)),
        with(&report, "comment", strings(1001)),
        with(&report, "comment", json!(false)),
        json!({ "reason": "x", "comment": "", "y": 1 }),
    ] {
        cases.push(show(&body));
    }
    all.insert("reportPluginReview".into(), cases.into());

    admin_bodies(&mut all);
    fleet_bodies(&mut all);
    policy_bodies(&mut all);
    approval_and_marketplace_bodies(&mut all);
    audit_bodies(&mut all);

    let text = serde_json::to_string_pretty(&Value::Object(all)).expect("serialise");
    crate::http::snapshot::assert_snapshot("request_bodies.json", &text);
}

/// The shared cases and `bodies` of one operation's parser, under its operation id.
fn cases_of<T: FromJson + std::fmt::Debug>(
    all: &mut serde_json::Map<String, Value>,
    operation: Operation,
    base: Value,
    bodies: Vec<Value>,
) {
    let show = |body: &Value| outcome::<T>(body, |v| format!("{v:?}"));
    let mut cases = Vec::new();
    shared(&mut cases, &base, show);
    cases.push(show(&base));
    cases.extend(bodies.iter().map(show));
    all.insert(operation.id().into(), cases.into());
}

/// The admin plane's bodies: names, users, roles, an administrator's issuance, revocation and
/// rotation.
fn admin_bodies(all: &mut serde_json::Map<String, Value>) {
    let name = json!({ "name": "prod" });
    cases_of::<Named<{ Operation::CreateWorkspace as usize }>>(
        all,
        Operation::CreateWorkspace,
        name.clone(),
        vec![
            json!({}),
            with(&name, "name", json!("")),
            with(&name, "name", strings(120)),
            with(&name, "name", strings(121)),
            with(&name, "name", json!("a\u{0}b")),
            with(&name, "name", json!(1)),
            with(&name, "name", json!(null)),
        ],
    );

    let user = json!({ "email": "ana@example.com" });
    cases_of::<NewUser>(
        all,
        Operation::CreateUser,
        user.clone(),
        vec![
            json!({}),
            with(&user, "role", json!("admin")),
            with(&user, "role", json!("operator")),
            with(&user, "role", json!("member")),
            with(&user, "role", json!("Admin")),
            with(&user, "role", json!(null)),
            with(&user, "email", json!("")),
            with(&user, "email", json!("no-at-sign")),
            with(
                &user,
                "email",
                json!(format!("{}@example.com", "a".repeat(320))),
            ),
            with(&user, "email", json!(["ana@example.com"])),
        ],
    );

    let disable = json!({ "reason": "left" });
    cases_of::<Disable>(
        all,
        Operation::DisableUser,
        disable.clone(),
        vec![
            json!({}),
            with(&disable, "reason", json!("")),
            with(&disable, "reason", strings(501)),
            with(&disable, "reason", json!(null)),
            with(&disable, "reason", json!(1)),
        ],
    );
    cases_of::<Enable>(all, Operation::EnableUser, json!({}), vec![]);

    let role = json!({ "role": "admin" });
    cases_of::<NewRole>(
        all,
        Operation::SetUserRole,
        role.clone(),
        vec![
            json!({}),
            with(&role, "role", json!("superuser")),
            with(&role, "role", json!(null)),
        ],
    );

    let issue = json!({ "name": "ci", "scopes": ["activity:read"], "workspaceIds": [ID] });
    cases_of::<UserTokenRequest>(
        all,
        Operation::IssueUserToken,
        issue.clone(),
        vec![
            json!({}),
            with(&issue, "organisationId", json!(ID)),
            with(&issue, "scopes", json!(["admin:write", "nope"])),
            with(&issue, "workspaceIds", json!([])),
            with(&issue, "environmentIds", json!([ID])),
            with(&issue, "expiresInDays", json!(91)),
            with(&issue, "name", json!("")),
        ],
    );

    let revoke = json!({ "reason": "leaked" });
    cases_of::<AdminRevocation>(
        all,
        Operation::RevokeTokenAsAdmin,
        revoke.clone(),
        vec![
            json!({}),
            with(&revoke, "workspaceId", json!(ID)),
            with(&revoke, "workspaceId", json!("x")),
            with(&revoke, "workspaceId", json!(null)),
            with(&revoke, "cascade", json!(true)),
            with(&revoke, "cascade", json!("yes")),
            with(&revoke, "reason", strings(501)),
        ],
    );

    let rotate = json!({ "graceSeconds": 3600 });
    cases_of::<Rotation>(
        all,
        Operation::RotateToken,
        rotate.clone(),
        vec![
            json!({}),
            with(&rotate, "graceSeconds", json!(0)),
            with(&rotate, "graceSeconds", json!(2_592_000)),
            with(&rotate, "graceSeconds", json!(2_592_001)),
            with(&rotate, "graceSeconds", json!(-1)),
            with(&rotate, "graceSeconds", json!(1.5)),
            with(&rotate, "graceSeconds", json!("60")),
            with(&rotate, "graceSeconds", json!(null)),
        ],
    );
}

/// The fleet's bodies: pools, runners, their URLs, secrets and keys.
fn fleet_bodies(all: &mut serde_json::Map<String, Value>) {
    let name = json!({ "name": "builders" });
    cases_of::<NewPool>(
        all,
        Operation::CreateRunnerPool,
        name.clone(),
        vec![
            json!({}),
            with(&name, "name", json!("")),
            with(&name, "name", strings(121)),
            with(&name, "name", json!(1)),
        ],
    );

    let runner = json!({ "name": "alpha" });
    let key = "Gb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=";
    cases_of::<NewRunner>(
        all,
        Operation::RegisterRunner,
        runner.clone(),
        vec![
            json!({}),
            with(&runner, "publicKey", json!(key)),
            with(&runner, "publicKey", json!("not base64!")),
            with(&runner, "publicKey", json!(1)),
            with(&runner, "url", json!("https://runner.example/hooks")),
            with(&runner, "url", json!("")),
            with(&runner, "url", json!(null)),
        ],
    );

    let url = json!({ "url": "https://runner.example/hooks" });
    cases_of::<DeliveryUrl>(
        all,
        Operation::SetRunnerDeliveryUrl,
        url.clone(),
        vec![
            json!({}),
            with(&url, "url", json!("")),
            with(&url, "url", json!(null)),
        ],
    );

    let rotation = json!({ "overlapHours": 24 });
    cases_of::<SecretRotation>(
        all,
        Operation::RotateRunnerWebhookSecret,
        rotation.clone(),
        vec![
            json!({}),
            with(&rotation, "overlapHours", json!(0)),
            with(&rotation, "overlapHours", json!(720)),
            with(&rotation, "overlapHours", json!(721)),
            with(&rotation, "overlapHours", json!(-1)),
            with(&rotation, "overlapHours", json!("24")),
        ],
    );

    cases_of::<NewKey>(
        all,
        Operation::AddRunnerKey,
        json!({}),
        vec![
            json!({ "publicKey": "not base64!" }),
            json!({ "publicKey": null }),
        ],
    );
    cases_of::<DisableAction>(all, Operation::DisableRunner, json!({}), vec![]);
    cases_of::<EnableAction>(all, Operation::EnableRunner, json!({}), vec![]);
    cases_of::<RemoveAction>(all, Operation::RemoveRunner, json!({}), vec![]);
    cases_of::<RevokeKeyAction>(all, Operation::RevokeRunnerKey, json!({}), vec![]);
}

/// The policy changes' bodies: activation, removal, rollback and the shadow (an install's
/// body is the component itself, not JSON).
fn policy_bodies(all: &mut serde_json::Map<String, Value>) {
    use super::policies::{Activation, Removal, Rollback, Shadow};
    cases_of::<Activation>(
        all,
        Operation::ActivatePolicy,
        json!({}),
        vec![
            json!({ "force": true }),
            json!({ "force": "yes" }),
            json!({ "force": null }),
        ],
    );
    cases_of::<Removal>(all, Operation::RemovePolicy, json!({}), vec![]);
    let rollback = json!({ "kind": "authorizer" });
    cases_of::<Rollback>(
        all,
        Operation::RollBackPolicy,
        rollback.clone(),
        vec![
            json!({}),
            with(&rollback, "kind", json!("moderator")),
            with(&rollback, "kind", json!("judge")),
            with(&rollback, "kind", json!(1)),
        ],
    );
    let shadow = json!({ "name": "strict", "version": 2 });
    cases_of::<Shadow>(
        all,
        Operation::SetShadowPolicy,
        shadow.clone(),
        vec![
            json!({}),
            without(&shadow, "version"),
            without(&shadow, "name"),
            with(&shadow, "version", json!("2")),
            with(&shadow, "version", json!(1.5)),
            with(&shadow, "name", json!("")),
        ],
    );
}

/// Deliveries', workflows' and the marketplace's bodies: a resend and a recovery, names,
/// decisions and their reasons, the self-approval rule and a restore.
fn approval_and_marketplace_bodies(all: &mut serde_json::Map<String, Value>) {
    cases_of::<Resend>(all, Operation::ResendDelivery, json!({}), vec![]);
    let since = json!({ "since": "2026-11-01T10:00:00+01:00" });
    cases_of::<Recover>(
        all,
        Operation::RecoverDeliveries,
        since.clone(),
        vec![
            json!({}),
            with(&since, "since", json!("2026-11-01T09:00:00Z")),
            with(&since, "since", json!("yesterday")),
            with(&since, "since", json!("")),
            with(&since, "since", json!(1)),
            with(&since, "since", json!(null)),
        ],
    );

    let name = json!({ "name": "deploy" });
    let names = || {
        vec![
            json!({}),
            with(&name, "name", json!("")),
            with(&name, "name", strings(121)),
            with(&name, "name", json!(1)),
        ]
    };
    type NewWorkflow = Named<{ Operation::CreateWorkflow as usize }>;
    type NewPlugin = Named<{ Operation::CreatePlugin as usize }>;
    cases_of::<NewWorkflow>(all, Operation::CreateWorkflow, name.clone(), names());
    cases_of::<NewPlugin>(all, Operation::CreatePlugin, name.clone(), names());
    cases_of::<NewRevision>(all, Operation::CreateWorkflowRevision, json!({}), vec![]);

    let reason = json!({ "reason": "checked the plan" });
    let reasons = || {
        vec![
            json!({}),
            with(&reason, "reason", json!("")),
            with(&reason, "reason", strings(1000)),
            with(&reason, "reason", strings(1001)),
            with(&reason, "reason", json!("a\u{0}b")),
            with(&reason, "reason", json!(null)),
        ]
    };
    cases_of::<Approval>(
        all,
        Operation::ApproveWorkflowRevision,
        reason.clone(),
        reasons(),
    );
    cases_of::<Rejection>(
        all,
        Operation::RejectWorkflowRevision,
        reason.clone(),
        reasons(),
    );

    let allowed = json!({ "allowed": true });
    cases_of::<SelfApproval>(
        all,
        Operation::SetSelfApproval,
        allowed.clone(),
        vec![
            json!({}),
            with(&allowed, "allowed", json!(false)),
            with(&allowed, "allowed", json!("yes")),
            with(&allowed, "allowed", json!(null)),
        ],
    );

    let restore = json!({ "reason": "the reports were unfounded" });
    cases_of::<Restore>(
        all,
        Operation::RestorePluginReview,
        restore.clone(),
        vec![
            json!({}),
            with(&restore, "reason", json!("")),
            with(&restore, "reason", strings(500)),
            with(&restore, "reason", strings(501)),
            with(&restore, "reason", json!(null)),
        ],
    );
}

/// The audit log's retention (seconds, or null for forever) and the purge's empty body.
fn audit_bodies(all: &mut serde_json::Map<String, Value>) {
    let retention = json!({ "retentionSeconds": 7_776_000 });
    cases_of::<Retention>(
        all,
        Operation::SetAuditRetention,
        retention.clone(),
        vec![
            json!({}),
            with(&retention, "retentionSeconds", json!(null)),
            with(&retention, "retentionSeconds", json!(0)),
            with(&retention, "retentionSeconds", json!(-1)),
            with(&retention, "retentionSeconds", json!(1.5)),
            with(&retention, "retentionSeconds", json!("90d")),
            with(&retention, "retentionSeconds", json!(i64::MAX)),
        ],
    );
    cases_of::<Purge>(all, Operation::PurgeAuditLog, json!({}), vec![]);
}
