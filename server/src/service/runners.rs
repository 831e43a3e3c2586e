//! Runner pools, runners and their keys: registered by an administrator (over the admin API,
//! `fleet.rs`), a pool deleted by a bearer token. Commands are in `commands.rs`, signed
//! requests in `runner_auth.rs`.

use chrono::{DateTime, Utc};
use ed25519_dalek::VerifyingKey;
use serde_json::json;
use uuid::Uuid;

use super::admin::{event_by, parse_name};
use super::{Permission, ServiceError, Services};
use crate::domain::{
    FieldError, NewAuditEvent, Principal, RunnerSecret, ValidationErrors, parse_uuid,
};
use crate::storage::{
    DeletePool, DeletePoolOutcome, Runner, RunnerKey, RunnerPool, Workspace, WriteContext,
};

pub use crate::domain::bounded_text;

/// `DELETE .../runner-pools/{poolId}` body.
#[derive(Debug, Clone, Default)]
pub struct DeletePoolInput {
    pub reason: Option<String>,
    pub force: bool,
}

impl DeletePoolInput {
    pub const MAX_REASON: usize = 500;
}

/// A registered runner, with its first key.
#[derive(Clone)]
pub struct RegisteredRunner {
    pub runner: Runner,
    pub key_id: Uuid,
    /// Only when the server generated the pair: shown once, never stored.
    pub private_key: Option<[u8; 32]>,
    /// The runner's own webhook secret (`whsec_…`): shown once, stored sealed.
    pub webhook_secret: RunnerSecret,
}

/// Written by hand: a derived one would print the private key's bytes into any log or panic
/// message that shows the value (the webhook secret's own `Debug` is redacted).
impl std::fmt::Debug for RegisteredRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredRunner")
            .field("runner", &self.runner)
            .field("key_id", &self.key_id)
            .field("private_key", &redacted_key(&self.private_key))
            .field("webhook_secret", &self.webhook_secret)
            .finish()
    }
}

/// What a `Debug` shows of a private key the server generated: whether there is one.
pub(super) fn redacted_key(key: &Option<[u8; 32]>) -> Option<&'static str> {
    key.map(|_| "redacted")
}

/// An event of a bearer caller's write in one of its workspaces.
pub(super) fn user_event(
    write: &WriteContext,
    principal: &Principal,
    workspace_id: Uuid,
    event_type: &'static str,
    target_kind: &'static str,
    target_id: Uuid,
    data: serde_json::Value,
) -> NewAuditEvent {
    NewAuditEvent {
        organisation_id: principal.organisation_id,
        workspace_id: Some(workspace_id),
        event_type,
        actor: write.actor(),
        target_kind,
        target_id,
        correlation_id: write.correlation_id().to_string(),
        occurred_at: Services::now(),
        data,
    }
}

fn public_key(raw: &[u8]) -> Result<VerifyingKey, ServiceError> {
    <[u8; 32]>::try_from(raw)
        .ok()
        .and_then(|bytes| VerifyingKey::from_bytes(&bytes).ok())
        .ok_or_else(|| {
            ValidationErrors::from(FieldError::new(
                "publicKey",
                "must be base64 of a 32-byte Ed25519 public key",
            ))
            .into()
        })
}

/// A new key of a runner: `public`, or a pair generated here whose private half is returned
/// (shown once, never stored).
fn new_runner_key(
    runner_id: Uuid,
    public: Option<&[u8]>,
    created_at: DateTime<Utc>,
) -> Result<(RunnerKey, Option<[u8; 32]>), ServiceError> {
    let (public, private) = match public {
        Some(bytes) => (public_key(bytes)?.to_bytes(), None),
        None => {
            let (private, public) = crate::domain::generate_keypair();
            (public, Some(private))
        }
    };
    let key = RunnerKey {
        id: Uuid::new_v4(),
        runner_id,
        public_key: public.to_vec(),
        created_at,
        revoked_at: None,
    };
    Ok((key, private))
}

/// The event of an administrator's change to a runner, in its pool's workspace, naming the
/// actor of `write`.
pub(super) fn runner_event(
    workspace: &Workspace,
    event_type: &'static str,
    runner_id: Uuid,
    write: &WriteContext,
    data: serde_json::Value,
) -> NewAuditEvent {
    event_by(
        write,
        workspace.organisation_id,
        Some(workspace.id),
        event_type,
        "runner",
        runner_id,
        data,
    )
}

impl Services {
    // ---- the fleet's rules, written with the acting administrator's context (`fleet.rs`) ----

    pub async fn create_pool(
        &self,
        workspace_id: Uuid,
        name: &str,
        write: &WriteContext,
    ) -> Result<RunnerPool, ServiceError> {
        let workspace = self.workspace(workspace_id).await?;
        let pool = RunnerPool {
            id: Uuid::new_v4(),
            workspace_id,
            name: parse_name("name", name)?,
            created_at: Self::now(),
            deleted_at: None,
        };
        let event = event_by(
            write,
            workspace.organisation_id,
            Some(workspace_id),
            "runner_pool.created",
            "runner_pool",
            pool.id,
            json!({ "name": pool.name }),
        );
        self.store.create_pool(write, &pool, &event).await.map_err(
            super::admin::already_exists(format!("a pool named {:?} already exists", pool.name)),
        )?;
        Ok(pool)
    }

    pub async fn list_pools(
        &self,
        workspace_id: Option<Uuid>,
    ) -> Result<Vec<RunnerPool>, ServiceError> {
        Ok(self.store.list_pools(workspace_id).await?)
    }

    /// Registers a runner in a live pool with its first key: the given public key, or a pair
    /// generated here whose private half is returned once.
    pub async fn register_runner(
        &self,
        pool_id: Uuid,
        name: &str,
        public: Option<&[u8]>,
        url: Option<&str>,
        write: &WriteContext,
    ) -> Result<RegisteredRunner, ServiceError> {
        let url = url.map(|u| self.delivery_url(u)).transpose()?;
        let pool = self.live_pool(pool_id).await?;
        let workspace = self.workspace(pool.workspace_id).await?;
        let now = Self::now();
        let runner_id = Uuid::new_v4();
        let (key, private) = new_runner_key(runner_id, public, now)?;
        let runner = Runner {
            id: runner_id,
            pool_id,
            name: parse_name("name", name)?,
            created_at: now,
            delivery_url: url.as_ref().map(|u| u.to_string()),
        };
        let data = json!({
            "poolId": pool_id,
            "name": runner.name,
            "keyId": key.id,
            "deliveryOrigin": url.as_ref().map(|u| u.origin()),
        });
        let event = runner_event(&workspace, "runner.registered", runner.id, write, data);
        let (webhook_secret, sealed) = self.new_runner_secret(runner.id);
        self.store
            .create_runner(write, &runner, &key, &sealed, &event)
            .await?;
        Ok(RegisteredRunner {
            runner,
            key_id: key.id,
            private_key: private,
            webhook_secret,
        })
    }

    /// Adds a key to a runner (rotation); returns the key id and, when generated, the private key.
    pub async fn add_runner_key(
        &self,
        runner_id: Uuid,
        public: Option<&[u8]>,
        write: &WriteContext,
    ) -> Result<(Uuid, Option<[u8; 32]>), ServiceError> {
        let runner = self
            .store
            .get_runner(runner_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such runner"))?;
        let pool = self.live_pool(runner.pool_id).await?;
        // A removed runner's keys stay revoked: a new one would make its reports count again.
        if self
            .store
            .runner_health(runner_id)
            .await?
            .is_some_and(|h| h.removed)
        {
            return Err(ServiceError::Conflict {
                code: "invalid_state",
                message: "the runner is removed".into(),
                details: None,
            });
        }
        let workspace = self.workspace(pool.workspace_id).await?;
        let (key, private) = new_runner_key(runner_id, public, Self::now())?;
        let data = json!({ "keyId": key.id });
        let event = runner_event(&workspace, "runner.key_added", runner_id, write, data);
        self.store.add_runner_key(write, &key, &event).await?;
        Ok((key.id, private))
    }

    pub async fn revoke_runner_key(
        &self,
        runner_id: Uuid,
        key_id: Uuid,
        write: &WriteContext,
    ) -> Result<(), ServiceError> {
        let (_, _, workspace) = self.runner_with_owners(runner_id).await?;
        let data = json!({ "keyId": key_id });
        let event = runner_event(&workspace, "runner.key_revoked", runner_id, write, data);
        if self
            .store
            .revoke_runner_key(write, runner_id, key_id, Self::now(), &event)
            .await?
        {
            Ok(())
        } else {
            Err(ServiceError::not_found(
                "the runner has no live key of that id",
            ))
        }
    }

    /// A runner with its pool (deleted or not) and the pool's workspace.
    pub(super) async fn runner_with_owners(
        &self,
        runner_id: Uuid,
    ) -> Result<(Runner, RunnerPool, Workspace), ServiceError> {
        let runner = self
            .store
            .get_runner(runner_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such runner"))?;
        let pool = self
            .store
            .get_pool(runner.pool_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such pool"))?;
        let workspace = self.workspace(pool.workspace_id).await?;
        Ok((runner, pool, workspace))
    }

    pub(super) async fn workspace(&self, id: Uuid) -> Result<Workspace, ServiceError> {
        self.store
            .get_workspace(id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such workspace"))
    }

    async fn live_pool(&self, id: Uuid) -> Result<RunnerPool, ServiceError> {
        match self.store.get_pool(id).await? {
            Some(pool) if pool.deleted_at.is_none() => Ok(pool),
            Some(_) => Err(ServiceError::Conflict {
                code: "pool_deleted",
                message: "the runner pool is deleted".into(),
                details: None,
            }),
            None => Err(ServiceError::not_found("no such runner pool")),
        }
    }

    // ---- v1 operations ----

    /// Soft-deletes a pool; refused (409) while commands are open unless `force` cancels them.
    pub async fn delete_pool(
        &self,
        principal: &Principal,
        workspace: &str,
        pool: &str,
        input: DeletePoolInput,
        write: &WriteContext,
    ) -> Result<(RunnerPool, u64), ServiceError> {
        self.authorize_permission(principal, &Permission::DeleteRunnerPool { workspace, pool })
            .await?;
        let workspace_id =
            parse_uuid(workspace).ok_or_else(|| ServiceError::forbidden("no access"))?;
        let pool_id =
            parse_uuid(pool).ok_or_else(|| ServiceError::not_found("no such runner pool"))?;
        let event = user_event(
            write,
            principal,
            workspace_id,
            "runner_pool.deleted",
            "runner_pool",
            pool_id,
            json!({ "reason": input.reason, "force": input.force }),
        );
        let outcome = self
            .store
            .delete_pool(
                write,
                &DeletePool {
                    workspace_id,
                    pool_id,
                    reason: input.reason,
                    force: input.force,
                    limited_to: principal.environment_ids.clone(),
                    at: Self::now(),
                    event,
                },
            )
            .await?;
        match outcome {
            DeletePoolOutcome::Deleted { pool, cancelled } => Ok((pool, cancelled)),
            DeletePoolOutcome::NotFound => Err(ServiceError::not_found("no such runner pool")),
            DeletePoolOutcome::OutsideEnvironments { open } => Err(ServiceError::Forbidden {
                reason: "the pool has open commands outside the token's environments".into(),
                details: Some(json!({ "openCommandsOutside": open })),
            }),
            DeletePoolOutcome::Busy { open } => Err(ServiceError::Conflict {
                code: "pool_busy",
                message: format!(
                    "the pool has {open} queued or running commands; pass \"force\": true to cancel them"
                ),
                details: Some(json!({ "openCommands": open })),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_debugs_without_its_private_key_or_webhook_secret() {
        let private_key = [0xa7_u8; 32];
        let secret = RunnerSecret::generate();
        let registered = RegisteredRunner {
            runner: Runner {
                id: Uuid::new_v4(),
                pool_id: Uuid::new_v4(),
                name: "build-1".into(),
                created_at: Utc::now(),
                delivery_url: None,
            },
            key_id: Uuid::new_v4(),
            private_key: Some(private_key),
            webhook_secret: secret.clone(),
        };
        let shown = format!("{registered:?}");
        assert!(shown.contains("build-1"), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
        assert!(!shown.contains("167, 167"), "the key's bytes: {shown}");
        assert!(!shown.contains(&format!("{private_key:?}")), "{shown}");
        assert!(!shown.contains(&secret.whsec()), "{shown}");
        let pretty = format!("{registered:#?}");
        assert!(
            !pretty.contains("167,\n") && !pretty.contains("whsec_"),
            "{pretty}"
        );
    }
}
