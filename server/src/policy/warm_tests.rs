//! Warm instances per organisation: no state crosses organisations, a replaced instance starts
//! empty, failures and bounds retire instances, and idle ones keep no ticker awake.

use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::engine::{PolicyEngine, PolicyFailure, PolicyKind};
use super::settings::EngineSettings;
use super::warm::WarmSettings;
use super::wit::authz_types as a;
use super::{CompiledPolicy, Instances, bench_support, fixtures};

fn engine(warm: WarmSettings) -> Arc<PolicyEngine> {
    PolicyEngine::new(EngineSettings {
        max_concurrent: 4,
        warm,
        ..EngineSettings::default()
    })
    .expect("engine")
}

fn bounds(per_organisation: usize, total: usize) -> WarmSettings {
    WarmSettings {
        per_organisation,
        total,
        ..WarmSettings::default_for(4)
    }
}

fn per_organisation(engine: &PolicyEngine, component: &[u8]) -> CompiledPolicy {
    engine
        .compile(PolicyKind::Authorizer, component)
        .expect("compiles")
        .with_instances(Instances::PerOrganisation)
}

fn org(n: u128) -> Uuid {
    Uuid::from_u128(0x0a1b_2c3d_4e5f_4a6b_8c7d_0000_0000_0000 + n)
}

/// A request whose principal belongs to `organisation`.
fn of(organisation: Uuid) -> a::AuthzRequest {
    let mut request = bench_support::authz_request();
    request.principal.organisation_id = organisation.to_string();
    request
}

fn block<T>(decision: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(decision)
}

/// `request` decided in the warm instances of `key`'s organisation.
fn decide(
    engine: &PolicyEngine,
    policy: &CompiledPolicy,
    request: &a::AuthzRequest,
    key: Uuid,
) -> Result<a::AuthzDecision, PolicyFailure> {
    block(engine.authorize_profiled_for(policy, request, key)).map(|(decision, _)| decision)
}

fn denied(decision: &Result<a::AuthzDecision, PolicyFailure>) -> bool {
    matches!(decision, Ok(a::AuthzDecision::Deny(_)))
}

#[test]
fn interleaved_organisations_never_meet_in_one_instance() {
    let engine = engine(bounds(4, 16));
    let policy = per_organisation(&engine, fixtures::REMEMBER_ORGS);
    let orgs = [org(1), org(2), org(3)];
    // Every order of three organisations, round after round, each decision in its own.
    for round in 0..60 {
        let o = orgs[(round * 7 + round / 3) % 3];
        assert_eq!(
            decide(&engine, &policy, &of(o), o),
            Ok(a::AuthzDecision::Allow),
            "round {round}"
        );
    }
    assert!(
        engine.warm().decided("reused") >= 55,
        "instances were reused, not made afresh: {}",
        engine.warm().decided("reused")
    );
    assert_eq!(engine.warm_counts(orgs[0]), (3, 1), "one instance each");
}

#[test]
fn an_instance_shared_between_organisations_is_caught_at_once() {
    // The fixture is a real detector: the second organisation in one instance is denied.
    let engine = engine(bounds(4, 16));
    let policy = per_organisation(&engine, fixtures::REMEMBER_ORGS);
    let (a_org, b_org) = (org(1), org(2));
    assert_eq!(
        decide(&engine, &policy, &of(a_org), a_org),
        Ok(a::AuthzDecision::Allow)
    );
    let shared = decide(&engine, &policy, &of(b_org), a_org);
    assert!(denied(&shared), "{shared:?}");
    // A fresh instance per decision never remembers anything.
    let fresh = engine
        .compile(PolicyKind::Authorizer, fixtures::REMEMBER_ORGS)
        .expect("compiles");
    for o in [a_org, b_org, a_org] {
        assert_eq!(
            block(engine.authorize_now(&fresh, &of(o))),
            Ok(a::AuthzDecision::Allow)
        );
    }
}

#[test]
fn a_replaced_instance_starts_empty() {
    let engine = engine(WarmSettings {
        max_decisions: 2,
        ..bounds(4, 16)
    });
    let policy = per_organisation(&engine, fixtures::REMEMBER_ORGS);
    let (a_org, b_org) = (org(1), org(2));
    assert_eq!(
        decide(&engine, &policy, &of(a_org), a_org),
        Ok(a::AuthzDecision::Allow)
    );
    // Forced into the same instance: its second and last decision sees two organisations.
    assert!(denied(&decide(&engine, &policy, &of(b_org), a_org)));
    assert_eq!(engine.warm().retired("decisions"), 1);
    // Its replacement has seen nothing.
    assert_eq!(
        decide(&engine, &policy, &of(b_org), a_org),
        Ok(a::AuthzDecision::Allow)
    );

    // An activation elsewhere retires the idle instances of versions no longer in force.
    engine.keep_warm_only(&[]);
    assert_eq!(engine.warm_counts(a_org), (0, 0));
    assert_eq!(
        decide(&engine, &policy, &of(a_org), a_org),
        Ok(a::AuthzDecision::Allow),
        "a new instance, which never saw the second organisation"
    );
    assert_eq!(
        engine.warm_counts(a_org),
        (0, 0),
        "a version no longer in force is not kept warm"
    );
}

#[test]
fn a_failed_decision_never_returns_its_instance() {
    let engine = engine(bounds(4, 16));
    let o = org(1);
    let trap = per_organisation(&engine, fixtures::TRAP);
    let trapped = decide(&engine, &trap, &of(o), o);
    assert!(
        matches!(trapped, Err(PolicyFailure::Trap(_))),
        "{trapped:?}"
    );
    let spin = per_organisation(&engine, fixtures::SPIN);
    assert_eq!(
        decide(&engine, &spin, &of(o), o),
        Err(PolicyFailure::Timeout)
    );
    let bomb = per_organisation(&engine, fixtures::BOMB);
    assert!(decide(&engine, &bomb, &of(o), o).is_err());
    assert_eq!(engine.warm_counts(o), (0, 0), "nothing kept");
    assert_eq!(engine.warm().retired("failure"), 3);
    assert_eq!(engine.warm().decided("reused"), 0);
}

#[test]
fn instances_are_bounded_per_organisation_and_in_all() {
    let engine = engine(bounds(1, 3));
    let first = per_organisation(&engine, fixtures::REMEMBER_ORGS);
    let second = per_organisation(&engine, fixtures::REMEMBER_ORGS);
    let o = org(1);
    // One instance per organisation: its instance of another version makes room.
    decide(&engine, &first, &of(o), o).expect("decides");
    decide(&engine, &second, &of(o), o).expect("decides");
    assert_eq!(engine.warm_counts(o), (1, 1));
    assert_eq!(engine.warm().retired("evicted"), 1);
    // Three in all: the least recently used idle instance gives way.
    for n in 2..=6 {
        decide(&engine, &first, &of(org(n)), org(n)).expect("decides");
        assert!(engine.warm_counts(o).0 <= 3);
    }
    assert_eq!(engine.warm_counts(org(6)), (3, 1));
    assert_eq!(engine.warm_counts(o), (3, 0), "the oldest went first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_bound_a_decision_runs_in_a_one_off_instance() {
    // Four decisions of one organisation at once, two instances allowed: two run in one-off
    // instances rather than wait.
    let engine = PolicyEngine::new(EngineSettings {
        max_concurrent: 4,
        deadline: Duration::from_millis(300),
        warm: bounds(2, 8),
        ..EngineSettings::default()
    })
    .expect("engine");
    let sleep = Arc::new(per_organisation(&engine, fixtures::SLEEP));
    let input = super::AuthzInput {
        principal: crate::domain::Principal {
            token_id: Uuid::new_v4(),
            public_id: "public".into(),
            user_id: Uuid::new_v4(),
            organisation_id: org(1),
            role: crate::domain::Role::Member,
            scopes: crate::domain::Scopes::all(),
            workspace_ids: vec![],
            environment_ids: vec![],
            expires_at: chrono::Utc::now(),
            correlation_id: None,
        },
        operation: crate::service::Operation::ReadActivity.id(),
        method: "GET",
        route: crate::service::Operation::ReadActivity.http().1,
        workspace_id: None,
        resource_ids: vec![],
    };
    let started = Instant::now();
    let decisions: Vec<_> = (0..4)
        .map(|_| {
            let (engine, sleep, input) = (engine.clone(), sleep.clone(), input.clone());
            tokio::spawn(async move { engine.authorize(sleep, &input).await })
        })
        .collect();
    for decision in decisions {
        assert_eq!(decision.await.expect("joins"), Err(PolicyFailure::Timeout));
    }
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "none waited for another"
    );
    assert_eq!(engine.warm().decided("new"), 2);
    assert_eq!(engine.warm().decided("one_off"), 2);
    assert_eq!(engine.warm_counts(org(1)), (0, 0));
}

#[test]
fn idle_warm_instances_keep_no_ticker_awake() {
    let engine = engine(bounds(4, 16));
    let policy = per_organisation(&engine, fixtures::REMEMBER_ORGS);
    let o = org(1);
    decide(&engine, &policy, &of(o), o).expect("decides");
    assert_eq!(engine.warm_counts(o), (1, 1), "kept warm");
    // Poll with a deadline: the ticker parks about a tick after the decision ends.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let before = engine.epoch_ticks();
        std::thread::sleep(Duration::from_millis(50));
        if engine.epoch_ticks() == before {
            break;
        }
        assert!(Instant::now() < deadline, "the ticker kept running");
    }
}
