//! A policy version decides under its own memory budget, set at install. No fixture needs a
//! few MiB and then stops (the bomb grows without end, the defaults need 128 KiB), so: the
//! bomb under a 2 MiB budget is stopped there (its measurement) and fails closed at decision
//! time on the memory budget; the default authorizer under the smallest budget decides.

use control_plane::policy::{Instances, MemoryBudget, PolicyKind, defaults, fixtures};
use control_plane::service::PolicyUpload;

use crate::support::{Call, admin_write, routes, spawn_app};

#[tokio::test]
async fn a_version_decides_under_its_own_memory_budget() {
    // The tests' patient deadline (1 s) stands: this test is about memory.
    let app = spawn_app().await;
    let tenant = app.bootstrap().await;
    let path = routes::activity(tenant.workspace_id);
    let org = tenant.organisation_id;
    let install = async |name: &str, bytes: &[u8], mib: u64| {
        let upload = PolicyUpload {
            name: name.to_owned(),
            kind: PolicyKind::Authorizer,
            component: bytes.to_vec().into(),
            memory: Some(MemoryBudget::from_mib(mib).unwrap()),
            cases: None,
            // The bomb is over its budget by design: stored all the same.
            force: true,
            instances: Instances::Fresh,
        };
        app.services
            .install_measured_policy(upload, &admin_write(), org)
            .await
            .unwrap()
    };

    let bomb = install("bomb", fixtures::BOMB, 2).await;
    let reason = bomb.budget.over_budget().expect("over its budget");
    assert!(reason.contains("exceeds the budget of 2 MiB"), "{reason}");
    assert!(
        bomb.budget.peak_memory_bytes < 16 << 20,
        "stopped at its own budget, not the server's: {:?}",
        bomb.budget
    );
    let refused = app
        .services
        .activate_policy("bomb@1", &admin_write(), org)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("over budget"), "{refused}");
    app.services
        .activate_policy_with("bomb@1", true, &admin_write(), org)
        .await
        .unwrap();
    app.services.reload_policies().await.unwrap();
    app.get(&path, &tenant.token)
        .expect(403, "policy_error")
        .await;
    assert!(
        app.metrics()
            .await
            .contains(r#"policy_failures_total{kind="authorizer",reason="memory"}"#),
        "the failure is the memory budget's"
    );

    // The smallest budget is room enough for the default authorizer: activated without force.
    let small = install("small", defaults::AUTHORIZER, 1).await;
    assert_eq!(small.budget.over_budget(), None);
    app.services
        .activate_policy("small@1", &admin_write(), org)
        .await
        .unwrap();
    app.services.reload_policies().await.unwrap();
    assert_eq!(app.get(&path, &tenant.token).status_code().await, 200);
}
