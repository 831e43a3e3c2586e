//! The drill's tenants: each is an organisation bootstrapped through the services (not over
//! HTTP), with its workspace, its admin user and token, and one runner pool. The attacker, the
//! good client and the policy measurement each get their own, so that no one's budgets are
//! spent by another.

use control_plane::domain::{CorrelationId, ExpiresInDays};
use control_plane::service::{BootstrapInput, Services};

use super::Res;

pub(super) struct Tenant {
    pub(super) org: uuid::Uuid,
    pub(super) workspace: uuid::Uuid,
    pub(super) user: uuid::Uuid,
    pub(super) token: String,
    pub(super) pool: uuid::Uuid,
}

pub(super) async fn tenant(services: &Services, name: &str) -> Res<Tenant> {
    let cid = CorrelationId::generate();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let boot = services
        .bootstrap(
            BootstrapInput {
                organisation: format!("{name}-{suffix}"),
                workspace: "main".into(),
                admin_email: format!("{name}@drill.test"),
                expires_in_days: ExpiresInDays::default(),
            },
            &cid,
        )
        .await?;
    let pool = services
        .create_pool(
            boot.workspace.id,
            "drill",
            &control_plane::storage::WriteContext::admin(&cid),
        )
        .await?;
    Ok(Tenant {
        org: boot.organisation.id,
        workspace: boot.workspace.id,
        user: boot.user.id,
        token: boot.credential.secret.expose().to_owned(),
        pool: pool.id,
    })
}
