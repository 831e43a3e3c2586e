//! An organisation's pools, runners and runner keys over the admin API. The authorizer decides
//! each first (the default policy's role table: an admin acts on its own organisation, an
//! operator on every one); then the route's pool or runner must belong to the route's
//! organisation (else the same 404 as one that does not exist), and the rules written once in
//! `runners.rs`, `runner_admin.rs`, `runner_secrets.rs` and `deliveries.rs` do the work with
//! the caller's write context, so each event names the user and token that acted.

use std::time::Duration;

use uuid::Uuid;

use super::directory::{AdminPage, Paged};
use super::runners::redacted_key;
use super::{Operation, RegisteredRunner, RotatedSecret, ServiceError, Services};
use crate::domain::{Principal, parse_uuid};
use crate::storage::{RemovedRunner, Runner, RunnerPool, RunnerStatus, Workspace, WriteContext};

/// A disable or enable: `changed` is false when the runner already was so.
#[derive(Debug, Clone, Copy)]
pub struct RunnerChange {
    pub runner_id: Uuid,
    pub changed: bool,
}

/// A key added to a runner; the private key only when the server generated the pair.
#[derive(Clone)]
pub struct RunnerKeyAdded {
    pub runner_id: Uuid,
    pub key_id: Uuid,
    pub private_key: Option<[u8; 32]>,
}

/// Written by hand, as [`RegisteredRunner`]'s: the private key never reaches a log.
impl std::fmt::Debug for RunnerKeyAdded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerKeyAdded")
            .field("runner_id", &self.runner_id)
            .field("key_id", &self.key_id)
            .field("private_key", &redacted_key(&self.private_key))
            .finish()
    }
}

impl Services {
    /// The pool the route names, which must belong (through its workspace) to the organisation.
    async fn pool_of(&self, organisation_id: Uuid, pool: &str) -> Result<RunnerPool, ServiceError> {
        let missing = || ServiceError::not_found("no such runner pool in this organisation");
        let id = parse_uuid(pool).ok_or_else(missing)?;
        let pool = self.store.get_pool(id).await?.ok_or_else(missing)?;
        match self.store.get_workspace(pool.workspace_id).await? {
            Some(w) if w.organisation_id == organisation_id => Ok(pool),
            _ => Err(missing()),
        }
    }

    /// The runner the route names, which must belong (through its pool) to the organisation.
    async fn runner_of(
        &self,
        organisation_id: Uuid,
        runner: &str,
    ) -> Result<(Runner, Workspace), ServiceError> {
        let missing = || ServiceError::not_found("no such runner in this organisation");
        let id = parse_uuid(runner).ok_or_else(missing)?;
        let (runner, _, workspace) = match self.runner_with_owners(id).await {
            Ok(found) => found,
            Err(ServiceError::NotFound { .. }) => return Err(missing()),
            Err(e) => return Err(e),
        };
        if workspace.organisation_id != organisation_id {
            return Err(missing());
        }
        Ok((runner, workspace))
    }

    pub async fn admin_create_pool(
        &self,
        principal: &Principal,
        organisation: &str,
        workspace: &str,
        name: &str,
        write: &WriteContext,
    ) -> Result<RunnerPool, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::CreateRunnerPool,
                organisation,
                Some(workspace),
            )
            .await?;
        let workspace = self.workspace_of(org, workspace).await?;
        self.create_pool(workspace.id, name, write).await
    }

    /// A workspace's pools, deleted ones included, in the order they were created.
    pub async fn admin_list_pools(
        &self,
        principal: &Principal,
        organisation: &str,
        workspace: &str,
        page: AdminPage,
    ) -> Result<Paged<RunnerPool>, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::ListRunnerPools,
                organisation,
                Some(workspace),
            )
            .await?;
        let workspace = self.workspace_of(org, workspace).await?;
        let rows = self
            .store
            .pools_page(workspace.id, page.after(), page.fetch())
            .await?;
        Ok(page.of(rows, |p| p.id))
    }

    /// Registers a runner; its private key (when generated) and webhook secret are in the
    /// answer only, never stored in clear.
    #[allow(
        clippy::too_many_arguments,
        reason = "the route's ids and the body's fields"
    )]
    pub async fn admin_register_runner(
        &self,
        principal: &Principal,
        organisation: &str,
        pool: &str,
        name: &str,
        public: Option<&[u8]>,
        url: Option<&str>,
        write: &WriteContext,
    ) -> Result<RegisteredRunner, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::RegisterRunner,
                organisation,
                Some(pool),
            )
            .await?;
        let pool = self.pool_of(org, pool).await?;
        self.register_runner(pool.id, name, public, url, write)
            .await
    }

    /// A pool's runners, removed ones included, in the order they were registered.
    pub async fn admin_list_runners(
        &self,
        principal: &Principal,
        organisation: &str,
        pool: &str,
        page: AdminPage,
    ) -> Result<Paged<RunnerStatus>, ServiceError> {
        let org = self
            .admit_admin(principal, Operation::ListRunners, organisation, Some(pool))
            .await?;
        let pool = self.pool_of(org, pool).await?;
        let rows = self
            .store
            .runners_page(pool.id, page.after(), page.fetch())
            .await?;
        Ok(page.of(rows, |r| r.id))
    }

    /// Sets (or with `None` clears) where the runner receives commands: https, or http only to
    /// a host the server's `--delivery-http-hosts` lists (the server's egress rule).
    pub async fn admin_set_runner_url(
        &self,
        principal: &Principal,
        organisation: &str,
        runner: &str,
        url: Option<&str>,
        write: &WriteContext,
    ) -> Result<Runner, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::SetRunnerDeliveryUrl,
                organisation,
                Some(runner),
            )
            .await?;
        let (runner, _) = self.runner_of(org, runner).await?;
        self.set_runner_url(runner.id, url, write).await
    }

    /// A new webhook secret, in the answer only; the replaced one signs for `overlap` more.
    pub async fn admin_rotate_runner_secret(
        &self,
        principal: &Principal,
        organisation: &str,
        runner: &str,
        overlap: Duration,
        write: &WriteContext,
    ) -> Result<RotatedSecret, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::RotateRunnerWebhookSecret,
                organisation,
                Some(runner),
            )
            .await?;
        let (runner, _) = self.runner_of(org, runner).await?;
        self.rotate_runner_secret(runner.id, overlap, write).await
    }

    pub async fn admin_disable_runner(
        &self,
        principal: &Principal,
        organisation: &str,
        runner: &str,
        write: &WriteContext,
    ) -> Result<RunnerChange, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::DisableRunner,
                organisation,
                Some(runner),
            )
            .await?;
        let (runner, _) = self.runner_of(org, runner).await?;
        let changed = self.disable_runner(runner.id, write).await?;
        Ok(RunnerChange {
            runner_id: runner.id,
            changed,
        })
    }

    pub async fn admin_enable_runner(
        &self,
        principal: &Principal,
        organisation: &str,
        runner: &str,
        write: &WriteContext,
    ) -> Result<RunnerChange, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::EnableRunner,
                organisation,
                Some(runner),
            )
            .await?;
        let (runner, _) = self.runner_of(org, runner).await?;
        let changed = self.enable_runner(runner.id, write).await?;
        Ok(RunnerChange {
            runner_id: runner.id,
            changed,
        })
    }

    pub async fn admin_remove_runner(
        &self,
        principal: &Principal,
        organisation: &str,
        runner: &str,
        write: &WriteContext,
    ) -> Result<(Uuid, RemovedRunner), ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::RemoveRunner,
                organisation,
                Some(runner),
            )
            .await?;
        let (runner, _) = self.runner_of(org, runner).await?;
        let removed = self.remove_runner(runner.id, write).await?;
        Ok((runner.id, removed))
    }

    /// A key for rotation: `public`, or a pair generated here whose private half is in the
    /// answer only.
    pub async fn admin_add_runner_key(
        &self,
        principal: &Principal,
        organisation: &str,
        runner: &str,
        public: Option<&[u8]>,
        write: &WriteContext,
    ) -> Result<RunnerKeyAdded, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::AddRunnerKey,
                organisation,
                Some(runner),
            )
            .await?;
        let (runner, _) = self.runner_of(org, runner).await?;
        let (key_id, private_key) = self.add_runner_key(runner.id, public, write).await?;
        Ok(RunnerKeyAdded {
            runner_id: runner.id,
            key_id,
            private_key,
        })
    }

    pub async fn admin_revoke_runner_key(
        &self,
        principal: &Principal,
        organisation: &str,
        runner: &str,
        key: &str,
        write: &WriteContext,
    ) -> Result<(), ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::RevokeRunnerKey,
                organisation,
                Some(runner),
            )
            .await?;
        let (runner, _) = self.runner_of(org, runner).await?;
        let key = parse_uuid(key)
            .ok_or_else(|| ServiceError::not_found("the runner has no live key of that id"))?;
        self.revoke_runner_key(runner.id, key, write).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_added_key_debugs_without_its_private_key() {
        let private_key = [0xa7_u8; 32];
        let added = RunnerKeyAdded {
            runner_id: Uuid::new_v4(),
            key_id: Uuid::new_v4(),
            private_key: Some(private_key),
        };
        for shown in [format!("{added:?}"), format!("{added:#?}")] {
            assert!(shown.contains(&added.key_id.to_string()), "{shown}");
            assert!(shown.contains("redacted"), "{shown}");
            // The bytes as a derived `Debug` prints them, on one line or one per line.
            assert!(
                !shown.contains("167, 167") && !shown.contains("167,\n"),
                "the key's bytes: {shown}"
            );
        }
        let without = RunnerKeyAdded {
            private_key: None,
            ..added
        };
        assert!(format!("{without:?}").contains("private_key: None"));
    }
}
