//! The default policies' decision tables, and hostile components contained.

use std::time::{Duration, Instant};

use super::engine::{PolicyEngine, PolicyFailure, PolicyKind};
use super::settings::EngineSettings;
use super::wit::{authz_types as a, moderation_types as m};
use super::{defaults, fixtures};
use crate::service::Operation;

const WS: &str = "6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab";
const OTHER_WS: &str = "00000000-0000-4000-8000-000000000000";
const ORG: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
const OTHER_ORG: &str = "f0e1d2c3-b4a5-4968-8776-655443322110";

/// Runs one decision to the end on a runtime of its own: the engine's timers need one.
fn block<T>(decision: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(decision)
}

fn engine() -> std::sync::Arc<PolicyEngine> {
    PolicyEngine::new(EngineSettings {
        max_concurrent: 4,
        ..EngineSettings::default()
    })
    .expect("engine")
}

fn request(operation: Operation, scopes: &[&str], workspace: Option<&str>) -> a::AuthzRequest {
    let (method, route) = operation.http();
    a::AuthzRequest {
        principal: a::Principal {
            kind: a::PrincipalKind::UserToken,
            id: "token".into(),
            user_id: "user".into(),
            organisation_id: "org".into(),
            workspace_ids: vec![WS.into()],
            environment_ids: vec![],
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            role: a::Role::Member,
        },
        operation: operation.id().into(),
        method: method.into(),
        route: route.into(),
        workspace_id: workspace.map(str::to_owned),
        resource_ids: vec![],
    }
}

fn allowed(engine: &PolicyEngine, policy: &super::CompiledPolicy, req: &a::AuthzRequest) -> bool {
    matches!(
        block(engine.authorize_now(policy, req)),
        Ok(a::AuthzDecision::Allow)
    )
}

/// An authorizer compiled from `component`, which must compile.
fn authorizer(engine: &PolicyEngine, component: &[u8]) -> super::CompiledPolicy {
    engine
        .compile(PolicyKind::Authorizer, component)
        .expect("the authorizer compiles")
}

/// Checks that `policy` fails `req` as a timeout in less than `limit` of wall-clock time,
/// which `why` explains.
fn assert_stopped_within(
    engine: &PolicyEngine,
    policy: &super::CompiledPolicy,
    req: &a::AuthzRequest,
    limit: Duration,
    why: &str,
) {
    let started = Instant::now();
    assert_eq!(
        block(engine.authorize_now(policy, req)),
        Err(PolicyFailure::Timeout)
    );
    assert!(started.elapsed() < limit, "{why}: {:?}", started.elapsed());
}

/// `/v1/me` tells a token about itself and its user's tokens: any live token (a member's here)
/// may ask, whatever its scopes.
#[test]
fn the_default_authorizer_lets_any_token_read_itself() {
    let engine = engine();
    let policy = authorizer(&engine, defaults::AUTHORIZER);
    let any_token: Vec<Operation> = Operation::bearer()
        .filter(|op| op.spec().auth == crate::domain::Auth::AnyToken)
        .collect();
    assert_eq!(
        any_token,
        [
            Operation::GetCaller,
            Operation::ListOwnTokens,
            Operation::RevokeOwnToken
        ]
    );
    for op in any_token {
        for scopes in [vec![], vec!["activity:read"]] {
            assert!(
                allowed(&engine, &policy, &request(op, &scopes, None)),
                "{op:?} {scopes:?}"
            );
        }
    }
}

#[test]
fn the_default_authorizer_enforces_every_scope_and_workspace() {
    let engine = engine();
    let policy = authorizer(&engine, defaults::AUTHORIZER);
    let all: Vec<&str> = crate::domain::Scope::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    // The operations a scope opens; one any token may perform has its own test.
    // The admin plane's operations also ask the role: their own test below.
    let contract = Operation::bearer().filter(|op| !op.administers());
    for (op, scope) in contract.filter_map(|op| Some((op, op.required_scope()?))) {
        let scope = scope.as_str();
        let others: Vec<&str> = all.iter().copied().filter(|s| *s != scope).collect();
        let workspace_route = !matches!(
            op,
            Operation::IssueToken | Operation::WriteReview | Operation::ReportReview
        );
        let ws = if workspace_route { Some(WS) } else { None };
        assert!(
            allowed(&engine, &policy, &request(op, &[scope], ws)),
            "{op:?} with its scope"
        );
        assert!(
            !allowed(&engine, &policy, &request(op, &others, ws)),
            "{op:?} without its scope"
        );
        if ws.is_some() {
            assert!(
                !allowed(&engine, &policy, &request(op, &all, Some(OTHER_WS))),
                "{op:?} elsewhere"
            );
            assert!(
                !allowed(&engine, &policy, &request(op, &all, Some("not-a-uuid"))),
                "{op:?} non-uuid"
            );
            assert!(
                allowed(
                    &engine,
                    &policy,
                    &request(op, &all, Some(&WS.to_uppercase()))
                ),
                "{op:?} upper case"
            );
        }
    }
    let mut unknown = request(Operation::ReadActivity, &all, Some(WS));
    unknown.operation = "somethingNew".into();
    assert!(
        !allowed(&engine, &policy, &unknown),
        "unknown operations are denied"
    );
}

/// An admin-plane question: the caller in `role` of organisation [`ORG`], naming `org`.
fn admin_request(op: Operation, role: a::Role, scopes: &[&str], org: &str) -> a::AuthzRequest {
    let mut req = request(op, scopes, None);
    req.principal.role = role;
    req.principal.organisation_id = ORG.into();
    req.resource_ids = vec![("organisationId".into(), org.into())];
    req
}

#[test]
fn the_default_authorizer_holds_the_role_table_of_the_admin_plane() {
    let engine = engine();
    let policy = authorizer(&engine, defaults::AUTHORIZER);
    let decide = |req: &a::AuthzRequest| block(engine.authorize_now(&policy, req));
    let admin_ops: Vec<Operation> = Operation::bearer().filter(|op| op.administers()).collect();
    assert!(!admin_ops.is_empty());
    for op in admin_ops {
        let scope = op.required_scope().expect("an admin scope").as_str();
        let allow = Ok(a::AuthzDecision::Allow);
        let ask = |role, scopes: &[&str], org: &str| decide(&admin_request(op, role, scopes, org));
        // The table's operator rows are exactly `Operation::operators_only`, which the service
        // enforces under any policy: the instance's operations, the organisations, and two
        // settings that constrain an organisation's own admins (the four-eyes rule, the audit
        // retention). Each other admin operation is allowed to its organisation's admin.
        let refused_to_admins = matches!(
            ask(a::Role::Admin, &[scope], ORG),
            Ok(a::AuthzDecision::Deny(d)) if d.status == a::DenyStatus::Forbidden
        );
        assert_eq!(
            refused_to_admins,
            op.operators_only(),
            "{op:?}: the role table and Operation::operators_only disagree"
        );
        if op.operators_only() {
            assert_eq!(ask(a::Role::Operator, &[scope], ORG), allow, "{op:?}");
            for role in [a::Role::Admin, a::Role::Member] {
                let refused = ask(role, &[scope], ORG);
                assert!(
                    matches!(&refused, Ok(a::AuthzDecision::Deny(d)) if d.status == a::DenyStatus::Forbidden),
                    "{op:?}: {role:?} is refused: {refused:?}"
                );
            }
            continue;
        }
        assert_eq!(
            ask(a::Role::Admin, &[scope], ORG),
            allow,
            "{op:?}: own organisation"
        );
        let upper = ORG.to_uppercase();
        assert_eq!(
            ask(a::Role::Admin, &[scope], &upper),
            allow,
            "{op:?}: upper case"
        );
        assert_eq!(
            ask(a::Role::Operator, &[scope], OTHER_ORG),
            allow,
            "{op:?}: operator"
        );
        let hidden = ask(a::Role::Admin, &[scope], OTHER_ORG);
        assert!(
            matches!(&hidden, Ok(a::AuthzDecision::Deny(d)) if d.status == a::DenyStatus::NotFound),
            "{op:?}: another organisation is not shown to exist: {hidden:?}"
        );
        assert_ne!(
            ask(a::Role::Member, &[scope], ORG),
            allow,
            "{op:?}: a member"
        );
        assert_ne!(
            ask(a::Role::Admin, &[], ORG),
            allow,
            "{op:?}: without {scope}"
        );
    }
}

/// A component built against `control-plane:policy@1.0.0` (no role in its principal) still
/// compiles and decides: it is asked the same question without the role.
#[test]
fn an_authorizer_of_the_1_0_0_world_still_decides() {
    let engine = engine();
    let policy = authorizer(&engine, fixtures::AUTHZ_1_0_0);
    let read = request(Operation::ReadActivity, &["activity:read"], Some(WS));
    assert!(allowed(&engine, &policy, &read));
    let lacking = request(Operation::ReadActivity, &["audit:read"], Some(WS));
    assert!(!allowed(&engine, &policy, &lacking));
    // It predates the admin plane, so it knows none of its operations.
    let admin = admin_request(
        Operation::ListUsers,
        a::Role::Operator,
        &["admin:read"],
        ORG,
    );
    assert!(!allowed(&engine, &policy, &admin));
}

fn review(title: &str, body: &str) -> m::ModerationRequest {
    m::ModerationRequest {
        review: m::Review {
            id: "r".into(),
            plugin_id: "p".into(),
            author_id: "author".into(),
            rating: 4,
            title: title.into(),
            body: body.into(),
        },
        report: None,
        prior_reports: vec![],
        blocklist: vec!["scam".into()],
    }
}

fn report(who: &str) -> m::Report {
    m::Report {
        reporter_id: who.into(),
        reason: m::ReportReason::Spam,
        comment: None,
    }
}

#[test]
fn the_default_moderator_applies_each_rule() {
    let engine = engine();
    let policy = engine
        .compile(PolicyKind::Moderator, defaults::MODERATOR)
        .expect("default compiles");
    let verdict = |req: &m::ModerationRequest| {
        block(engine.moderate_now(&policy, req))
            .expect("decides")
            .verdict
    };
    use m::Verdict::*;
    assert_eq!(
        verdict(&review("Solid plugin", "Does what it says, fast.")),
        Publish
    );
    assert_eq!(
        verdict(&review("See", "details at https://example.com")),
        Hold
    );
    assert_eq!(
        verdict(&review("Buy", "https://a.example www.b.example")),
        Reject
    );
    assert_eq!(verdict(&review("Call me", "ring 0123 456 7890 now")), Hold);
    assert_eq!(
        verdict(&review("Mail", "write to someone@example.com")),
        Hold
    );
    assert_eq!(
        verdict(&review(
            "THIS PLUGIN IS TERRIBLE",
            "I HATE EVERYTHING ABOUT IT"
        )),
        Hold
    );
    assert_eq!(verdict(&review("Great", "sooooooooo good")), Hold);
    assert_eq!(verdict(&review("Total", "a scam, avoid")), Reject);
    let mut bad_rating = review("ok", "ok");
    bad_rating.review.rating = 9;
    assert_eq!(verdict(&bad_rating), Reject);

    // Hidden after three distinct reporters (the author and repeats do not count).
    let mut reported = review("Fine", "fine");
    reported.prior_reports = vec![report("u1"), report("u1"), report("author")];
    reported.report = Some(report("u2"));
    assert_eq!(verdict(&reported), Publish, "two distinct reporters");
    reported.report = Some(report("u3"));
    reported.prior_reports.push(report("u2"));
    assert_eq!(verdict(&reported), Hide, "three distinct reporters");
}

#[test]
fn hostile_components_are_contained_and_the_default_still_answers() {
    let engine = engine();
    let default = authorizer(&engine, defaults::AUTHORIZER);
    let req = request(Operation::ReadActivity, &["activity:read"], Some(WS));

    let spin = authorizer(&engine, fixtures::SPIN);
    let limit = Duration::from_millis(500);
    let why = "stopped near the 50 ms deadline";
    assert_stopped_within(&engine, &spin, &req, limit, why);

    let bomb = authorizer(&engine, fixtures::BOMB);
    let outcome = block(engine.authorize_now(&bomb, &req));
    // Contained either way: on a starved CPU the deadline can stop it before the memory cap.
    assert!(
        matches!(
            outcome,
            Err(PolicyFailure::Memory | PolicyFailure::Trap(_) | PolicyFailure::Timeout)
        ),
        "{outcome:?}"
    );

    let trap = authorizer(&engine, fixtures::TRAP);
    assert!(matches!(
        block(engine.authorize_now(&trap, &req)),
        Err(PolicyFailure::Trap(_))
    ));

    let wrong_world = engine
        .compile(PolicyKind::Authorizer, defaults::MODERATOR)
        .expect_err("a moderator is no authorizer");
    assert!(wrong_world.contains("does not implement"), "{wrong_world}");
    let garbage = engine
        .compile(PolicyKind::Authorizer, b"\0asm garbage that is not wasm")
        .expect_err("garbage");
    assert!(garbage.contains("not a valid component"), "{garbage}");
    assert!(engine.compile(PolicyKind::Authorizer, b"hello").is_err());

    for _ in 0..3 {
        assert!(allowed(&engine, &default, &req));
    }
}

#[test]
fn the_epoch_ticks_only_while_a_decision_runs() {
    let engine = engine();
    let spin = authorizer(&engine, fixtures::SPIN);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(engine.epoch_ticks(), 0, "an idle engine does not tick");

    let req = request(Operation::ReadActivity, &["activity:read"], Some(WS));
    let why = "a guest that starts on a sleeping ticker is still stopped near its deadline";
    assert_stopped_within(&engine, &spin, &req, Duration::from_millis(500), why);
    let after = engine.epoch_ticks();
    assert!(
        after > 40,
        "the ticker ran through the 50 ms deadline: {after} ticks"
    );

    std::thread::sleep(Duration::from_millis(100));
    let idle = engine.epoch_ticks();
    assert!(
        idle <= after + 2,
        "the ticker sleeps again: {after}, then {idle}"
    );
}

#[test]
fn no_state_survives_between_decisions() {
    // The same request twice gives the same answer from fresh instances, and a trap in between
    // changes nothing.
    let engine = engine();
    let default = authorizer(&engine, defaults::AUTHORIZER);
    let trap = authorizer(&engine, fixtures::TRAP);
    let req = request(Operation::ReadActivity, &["activity:read"], Some(WS));
    let first = block(engine.authorize_now(&default, &req));
    let _ = block(engine.authorize_now(&trap, &req));
    assert_eq!(block(engine.authorize_now(&default, &req)), first);
}

#[test]
fn the_default_policies_pass_their_own_case_files() {
    let engine = engine();
    for (kind, component, cases) in [
        (
            PolicyKind::Authorizer,
            defaults::AUTHORIZER,
            include_str!("../../../policies/authz/cases.json"),
        ),
        (
            PolicyKind::Moderator,
            defaults::MODERATOR,
            include_str!("../../../policies/moderation/cases.json"),
        ),
    ] {
        let results = block(super::run_cases(&engine, kind, component, cases)).expect("cases run");
        assert!(results.len() > 10);
        let failed: Vec<_> = results.iter().filter(|r| !r.passed()).collect();
        assert!(failed.is_empty(), "{failed:?}");
    }
    // A component that disagrees is caught.
    let results = block(super::run_cases(
        &engine,
        PolicyKind::Authorizer,
        fixtures::DENY_ALL,
        include_str!("../../../policies/authz/cases.json"),
    ))
    .expect("cases run");
    assert!(results.iter().any(|r| !r.passed()));
}

#[test]
fn a_sleeping_policy_is_stopped_at_its_deadline() {
    // The guest blocks in a WASI clock wait for 30 s: a host call, where the epoch deadline
    // cannot reach it. The wall-clock deadline must.
    let engine = engine();
    let sleep = authorizer(&engine, fixtures::SLEEP);
    let req = request(Operation::ReadActivity, &["activity:read"], Some(WS));
    let limit = Duration::from_secs(2);
    let why = "stopped near the 50 ms deadline, not after the 30 s sleep";
    assert_stopped_within(&engine, &sleep, &req, limit, why);
    let default = authorizer(&engine, defaults::AUTHORIZER);
    assert!(allowed(&engine, &default, &req));
}

fn input() -> super::AuthzInput {
    super::AuthzInput {
        principal: crate::domain::Principal {
            token_id: uuid::Uuid::new_v4(),
            public_id: "public".into(),
            user_id: uuid::Uuid::new_v4(),
            organisation_id: uuid::Uuid::new_v4(),
            role: crate::domain::Role::Operator,
            scopes: crate::domain::Scopes::all(),
            workspace_ids: vec![WS.parse().expect("uuid")],
            environment_ids: vec![],
            expires_at: chrono::Utc::now(),
            correlation_id: None,
        },
        operation: Operation::ReadActivity.id(),
        method: "GET",
        route: Operation::ReadActivity.http().1,
        workspace_id: Some(WS.into()),
        resource_ids: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_waits_for_a_slot_at_most_the_queue_timeout() {
    let engine = PolicyEngine::new(EngineSettings {
        deadline: Duration::from_millis(1000),
        max_concurrent: 1,
        queue_timeout: Duration::from_millis(50),
        ..EngineSettings::default()
    })
    .expect("engine");
    let sleep = std::sync::Arc::new(
        engine
            .compile(PolicyKind::Authorizer, fixtures::SLEEP)
            .expect("sleep compiles"),
    );
    let holder = {
        let (engine, sleep) = (engine.clone(), sleep.clone());
        tokio::spawn(async move { engine.authorize(sleep, &input()).await })
    };
    // Let the first decision take the only slot.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let refused = engine.authorize(sleep, &input()).await;
    assert!(
        matches!(refused, Err(PolicyFailure::Unavailable(_))),
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "refused after the queue timeout, before the slot came free: {:?}",
        started.elapsed()
    );
    assert_eq!(
        holder.await.expect("joins"),
        Err(PolicyFailure::Timeout),
        "the slot holder is cut at its deadline"
    );
}

/// The memo answers only the exact request the built-in authorizer allowed: a changed
/// principal, path or operation is asked afresh, and a denial is never kept.
#[test]
fn the_built_in_authorizer_remembers_an_allow_for_that_request_only() {
    let engine = engine();
    let policy = authorizer(&engine, defaults::AUTHORIZER);
    let decide = |req: &a::AuthzRequest| block(engine.authorize_in_place(&policy, req));
    let memo = policy
        .memo
        .as_ref()
        .expect("the built-in authorizer has a memo");
    let read = request(Operation::ReadActivity, &["activity:read"], Some(WS));
    assert_eq!(decide(&read), Ok(a::AuthzDecision::Allow));
    assert_eq!(decide(&read), Ok(a::AuthzDecision::Allow));
    assert_eq!(memo.len(), 1, "one allow, remembered once");

    let mut scope_gone = read.clone();
    scope_gone.principal.scopes = vec!["audit:read".into()];
    let mut workspace_gone = read.clone();
    workspace_gone.principal.workspace_ids.clear();
    let elsewhere = request(Operation::ReadActivity, &["activity:read"], Some(OTHER_WS));
    let mut other_operation = request(Operation::ReadAuditStream, &["activity:read"], Some(WS));
    other_operation.principal = read.principal.clone();
    for (what, req) in [
        ("without the scope", &scope_gone),
        ("without the workspace", &workspace_gone),
        ("in another workspace", &elsewhere),
        ("for another operation", &other_operation),
    ] {
        assert!(
            matches!(decide(req), Ok(a::AuthzDecision::Deny(_))),
            "{what}: denied, not answered from the memo"
        );
    }
    assert_eq!(memo.len(), 1, "denials are not remembered");

    // What the memo holds is answered without the policy: a request the policy would deny
    // comes back allowed once it is in the memo (which only an allow ever puts there).
    memo.remember(&scope_gone);
    assert_eq!(decide(&scope_gone), Ok(a::AuthzDecision::Allow));
}

#[test]
fn installed_authorizers_and_moderators_have_no_memo() {
    let engine = engine();
    assert!(authorizer(&engine, fixtures::DENY_ALL).memo.is_none());
    let moderator = engine
        .compile(PolicyKind::Moderator, defaults::MODERATOR)
        .expect("the moderator compiles");
    assert!(moderator.memo.is_none());
}

/// Everything a request carries that the built-in authorizer does not read (its token, user,
/// organisation, environments, kind, route and path ids other than the workspace): varied, the
/// decision stays, so the memo may leave them out of its key.
#[test]
fn the_built_in_authorizer_reads_nothing_the_memo_key_leaves_out() {
    let engine = engine();
    let policy = authorizer(&engine, defaults::AUTHORIZER);
    let decide = |req: &a::AuthzRequest| block(engine.authorize_now(&policy, req));
    let upper = WS.to_ascii_uppercase();
    // The operations a scope opens; one any token may perform has its own test.
    for (operation, scope) in Operation::bearer().filter_map(|op| Some((op, op.required_scope()?)))
    {
        let scope = scope.as_str();
        for scopes in [vec![], vec![scope], vec!["audit:read"]] {
            for workspace in [None, Some(WS), Some(OTHER_WS), Some(upper.as_str())] {
                let base = request(operation, &scopes, workspace);
                let expected = decide(&base);
                let mut varied = base.clone();
                varied.principal.kind = a::PrincipalKind::Runner;
                varied.principal.id = "another-token".into();
                varied.principal.user_id = "another-user".into();
                varied.principal.organisation_id = "another-org".into();
                varied.principal.environment_ids = vec![OTHER_WS.into()];
                varied.method = "PATCH".into();
                varied.route = "/elsewhere/{id}".into();
                varied.resource_ids = vec![
                    ("tokenId".into(), OTHER_WS.into()),
                    ("poolId".into(), "not-an-id".into()),
                ];
                assert_eq!(decide(&varied), expected, "{base:?}");
            }
        }
    }
}

/// The admin plane's allows depend on the role and on whether the route's organisation is the
/// caller's own: neither an admin asking about another organisation nor a lower role may be
/// answered from an allow the memo holds, and an operator varying the id mints no new key.
#[test]
fn the_memo_never_answers_an_admin_question_with_another_role_or_organisation() {
    let engine = engine();
    let policy = authorizer(&engine, defaults::AUTHORIZER);
    let memo = policy.memo.as_ref().expect("a memo");
    let op = Operation::ListUsers;
    let allow = Ok(a::AuthzDecision::Allow);
    let own = admin_request(op, a::Role::Admin, &["admin:read"], ORG);
    assert_eq!(block(engine.authorize_in_place(&policy, &own)), allow);
    let foreign = admin_request(op, a::Role::Admin, &["admin:read"], OTHER_ORG);
    assert!(!memo.allows(&foreign));
    assert_ne!(block(engine.authorize_in_place(&policy, &foreign)), allow);

    let operator = admin_request(op, a::Role::Operator, &["admin:read"], OTHER_ORG);
    assert_eq!(block(engine.authorize_in_place(&policy, &operator)), allow);
    assert!(memo.allows(&operator));
    assert!(!memo.allows(&foreign), "an admin is not an operator");
    let mut member = own.clone();
    member.principal.role = a::Role::Member;
    assert!(!memo.allows(&member), "a member is not an admin");
    assert_ne!(block(engine.authorize_in_place(&policy, &member)), allow);
    // Another organisation id is the same key for the operator: "not its own".
    let elsewhere = admin_request(op, a::Role::Operator, &["admin:read"], OTHER_WS);
    assert!(memo.allows(&elsewhere));
}

/// A token id in the path, or the workspace id in another case, is no new key: a caller
/// cannot fill the memo by varying what the policy does not read or compares case-blind.
#[test]
fn ids_in_any_case_and_path_ids_the_policy_ignores_share_one_key() {
    let engine = engine();
    let policy = authorizer(&engine, defaults::AUTHORIZER);
    let memo = policy.memo.as_ref().expect("a memo");
    let base = request(Operation::RevokeToken, &["tokens:revoke"], Some(WS));
    for i in 0..200u32 {
        let mut req = base.clone();
        req.resource_ids = vec![(
            "tokenId".into(),
            format!("{i:08x}-0000-4000-8000-000000000000"),
        )];
        let workspace: String = WS
            .chars()
            .enumerate()
            .map(|(n, c)| {
                if (i >> (n % 32)) & 1 == 1 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        req.workspace_id = Some(workspace);
        assert_eq!(
            block(engine.authorize_in_place(&policy, &req)),
            Ok(a::AuthzDecision::Allow)
        );
    }
    assert_eq!(memo.len(), 1, "one key for all of them");
}

/// The memo never holds a request naming a workspace outside the principal's grants, nor
/// answers one in a form the policy refuses (a UUID without hyphens).
#[test]
fn a_workspace_outside_the_grants_leaves_no_entry() {
    let engine = engine();
    let policy = authorizer(&engine, defaults::AUTHORIZER);
    let memo = policy.memo.as_ref().expect("a memo");
    let outside = request(Operation::ReadActivity, &["activity:read"], Some(OTHER_WS));
    memo.remember(&outside);
    assert!(!memo.allows(&outside));
    assert_eq!(memo.len(), 0);
    let granted = request(Operation::ReadActivity, &["activity:read"], Some(WS));
    assert_eq!(
        block(engine.authorize_in_place(&policy, &granted)),
        Ok(a::AuthzDecision::Allow)
    );
    let mut simple = granted.clone();
    simple.workspace_id = Some(WS.replace('-', ""));
    assert!(
        matches!(
            block(engine.authorize_in_place(&policy, &simple)),
            Ok(a::AuthzDecision::Deny(_))
        ),
        "the policy's answer, not the memo's"
    );
    assert_eq!(memo.len(), 1);
}

/// One organisation filling the memo with keys of its own (here 20,000 principals with
/// different workspaces) empties its own share, never another organisation's.
#[test]
fn one_organisation_flooding_the_memo_empties_only_its_own_share() {
    let engine = engine();
    let policy = authorizer(&engine, defaults::AUTHORIZER);
    let memo = policy.memo.as_ref().expect("a memo");
    // A request the policy would deny (no scope), put in the memo by hand: answered allowed
    // for as long as the memo keeps it, so the answer shows whether it was kept.
    let mut kept = request(Operation::ReadActivity, &[], Some(WS));
    kept.principal.organisation_id = "victim".into();
    memo.remember(&kept);
    assert!(memo.allows(&kept));
    let mut flood = request(Operation::ReadActivity, &["activity:read"], None);
    flood.principal.organisation_id = "flooder".into();
    for i in 0..20_000u32 {
        flood.principal.id = format!("token-{i}");
        flood.principal.workspace_ids = vec![format!("{i:08x}-0000-4000-8000-000000000000")];
        memo.remember(&flood);
        assert!(memo.allows(&flood));
    }
    assert!(memo.allows(&kept), "the other organisation's allow is kept");
}

/// Each share starts over when full, a key larger than a share is never kept, and a new
/// organisation past the count takes the share used least recently: the memo stays under
/// shares times their budget.
#[test]
fn the_memo_holds_a_bounded_number_of_bounded_shares() {
    let memo = super::memo::AllowMemo::new(2_000, 2);
    let of = |org: &str, token: u32| {
        let mut req = request(Operation::ReadActivity, &["activity:read"], Some(WS));
        req.principal.organisation_id = org.into();
        req.principal.workspace_ids = vec![
            WS.into(),
            format!("{token:08x}-0000-4000-8000-000000000000"),
        ];
        req
    };
    for i in 0..20 {
        memo.remember(&of("a", i));
        assert!(memo.allows(&of("a", i)));
        assert!(memo.bytes() <= 2_000, "{}", memo.bytes());
    }
    assert!(memo.len_of("a") < 20, "bounded: {} keys", memo.len_of("a"));
    let mut huge = of("a", 0);
    huge.principal.workspace_ids = (0..100)
        .map(|i| format!("{i:08x}-0000-4000-8000-000000000000"))
        .chain([WS.to_owned()])
        .collect();
    memo.remember(&huge);
    assert!(
        !memo.allows(&huge),
        "a key past a share's budget is not kept"
    );

    memo.remember(&of("b", 0));
    // `a` is used again; `b` is now the least recently used share.
    assert!(memo.allows(&of("a", 19)));
    memo.remember(&of("c", 0));
    assert_eq!(memo.len_of("b"), 0, "the stalest share gave way");
    assert!(memo.allows(&of("a", 19)) && memo.allows(&of("c", 0)));
    assert!(memo.bytes() <= 2 * 2_000);
}
