//! Runner pools, runners and their keys, runner commands, and the signed delivery reports.

use std::time::Duration;

use ed25519_dalek::{Signature, VerifyingKey};
use serde_json::json;
use uuid::Uuid;

use super::admin::{admin_event, parse_name};
use super::{Permission, ServiceError, Services};
use crate::domain::{
    CLOCK_TOLERANCE_SECS, CommandStatus, CorrelationId, DeliveryStatus, FieldError, NewAuditEvent,
    Principal, RunnerSecret, RunnerSignature, ValidationErrors, parse_uuid, signing_message,
    text_digest,
};
use crate::storage::{
    CommandTimeout, DeletePool, DeletePoolOutcome, DeliveryTransition, OverdueCommand, Runner,
    RunnerCommand, RunnerKey, RunnerPool, SubmitOutcome, WebhookDelivery, WriteContext, keys,
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

/// `POST .../runner-commands` body, each field within its bounds.
#[derive(Debug, Clone)]
pub struct SubmitCommandInput {
    pub pool_id: Uuid,
    pub command: String,
    pub args: Vec<String>,
    pub environment_id: Option<Uuid>,
    pub timeout_seconds: i32,
}

impl SubmitCommandInput {
    pub const MAX_COMMAND: usize = 200;
    pub const MAX_ARGS: usize = 64;
    pub const MAX_ARG: usize = 4096;
    pub const DEFAULT_TIMEOUT: i32 = 3600;
    pub const MIN_TIMEOUT: i64 = 1;
    pub const MAX_TIMEOUT: i64 = 86_400;

    pub fn parse_timeout(n: i64) -> Result<i32, String> {
        if (Self::MIN_TIMEOUT..=Self::MAX_TIMEOUT).contains(&n) {
            Ok(n as i32)
        } else {
            Err(format!(
                "must be an integer from {} to {}",
                Self::MIN_TIMEOUT,
                Self::MAX_TIMEOUT
            ))
        }
    }
}

/// A command's deadline counts from its submission, not from its dispatch: a command no runner
/// ever picks up must time out too, and nothing records a dispatch time before the runner's
/// first report.
pub fn command_deadline(
    created_at: chrono::DateTime<chrono::Utc>,
    timeout_seconds: i32,
) -> chrono::DateTime<chrono::Utc> {
    created_at + chrono::Duration::seconds(i64::from(timeout_seconds))
}

/// Overdue commands read per sweep; a full batch asks the sweeper to come back at once.
pub const TIMEOUT_BATCH: u32 = 100;

/// What one timeout sweep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeoutSweep {
    /// Commands this sweep failed (another replica may have failed some it read).
    pub failed: u64,
    /// The read was a full batch: more may be overdue.
    pub more: bool,
}

/// A runner's report on a delivery.
#[derive(Debug, Clone)]
pub struct DeliveryStatusInput {
    pub status: DeliveryStatus,
    pub detail: Option<String>,
    pub exit_code: Option<i32>,
}

impl DeliveryStatusInput {
    pub const MAX_DETAIL: usize = 2000;

    /// A runner reports what happened; `pending` is where deliveries start, never a report.
    pub const REPORTABLE: [DeliveryStatus; 4] = [
        DeliveryStatus::Received,
        DeliveryStatus::Running,
        DeliveryStatus::Succeeded,
        DeliveryStatus::Failed,
    ];

    pub fn parse_status(raw: &str) -> Result<DeliveryStatus, String> {
        match DeliveryStatus::parse(raw) {
            Ok(s) if Self::REPORTABLE.contains(&s) => Ok(s),
            _ => {
                let names: Vec<&str> = Self::REPORTABLE.iter().map(|s| s.as_str()).collect();
                Err(format!("must be one of {}", names.join(", ")))
            }
        }
    }
}

/// A runner whose signature verified: what it may act on.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerPrincipal {
    pub runner_id: Uuid,
    pub key_id: Uuid,
    pub pool_id: Uuid,
    pub workspace_id: Uuid,
    pub organisation_id: Uuid,
}

/// One signed request, as received.
#[derive(Debug, Clone)]
pub struct SignedRequest<'a> {
    pub signature: RunnerSignature,
    pub method: &'a str,
    /// As sent, without the query string.
    pub path: &'a str,
    pub body_sha256: [u8; 32],
}

/// A runner registered by the admin CLI, with its first key.
#[derive(Debug, Clone)]
pub struct RegisteredRunner {
    pub runner: Runner,
    pub key_id: Uuid,
    /// Only when the server generated the pair: shown once, never stored.
    pub private_key: Option<[u8; 32]>,
    /// The runner's own webhook secret (`whsec_…`): shown once, stored sealed.
    pub webhook_secret: RunnerSecret,
}

/// Nonces are kept at least twice the clock tolerance, so a nonce cannot be replayed while its
/// timestamp is still acceptable.
const NONCE_TTL: Duration = Duration::from_secs(2 * CLOCK_TOLERANCE_SECS as u64 + 60);

/// An event of a bearer caller's write in one of its workspaces.
fn user_event(
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

impl Services {
    // ---- admin (cpctl) ----

    pub async fn create_pool(
        &self,
        workspace_id: Uuid,
        name: &str,
        cid: &CorrelationId,
    ) -> Result<RunnerPool, ServiceError> {
        let workspace = self.workspace(workspace_id).await?;
        let pool = RunnerPool {
            id: Uuid::new_v4(),
            workspace_id,
            name: parse_name("name", name)?,
            created_at: Self::now(),
            deleted_at: None,
        };
        let event = admin_event(
            workspace.organisation_id,
            Some(workspace_id),
            "runner_pool.created",
            "runner_pool",
            pool.id,
            cid,
            json!({ "name": pool.name }),
        );
        self.store
            .create_pool(&WriteContext::admin(cid), &pool, &event)
            .await
            .map_err(super::admin::already_exists(format!(
                "a pool named {:?} already exists",
                pool.name
            )))?;
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
        cid: &CorrelationId,
    ) -> Result<RegisteredRunner, ServiceError> {
        let url = url.map(|u| self.delivery_url(u)).transpose()?;
        let pool = self.live_pool(pool_id).await?;
        let workspace = self.workspace(pool.workspace_id).await?;
        let (public, private) = match public {
            Some(bytes) => (public_key(bytes)?.to_bytes(), None),
            None => {
                let (private, public) = crate::domain::generate_keypair();
                (public, Some(private))
            }
        };
        let now = Self::now();
        let runner = Runner {
            id: Uuid::new_v4(),
            pool_id,
            name: parse_name("name", name)?,
            created_at: now,
            delivery_url: url.as_ref().map(|u| u.to_string()),
        };
        let key = RunnerKey {
            id: Uuid::new_v4(),
            runner_id: runner.id,
            public_key: public.to_vec(),
            created_at: now,
            revoked_at: None,
        };
        let event = admin_event(
            workspace.organisation_id,
            Some(pool.workspace_id),
            "runner.registered",
            "runner",
            runner.id,
            cid,
            json!({
                "poolId": pool_id,
                "name": runner.name,
                "keyId": key.id,
                "deliveryOrigin": url.as_ref().map(|u| u.origin()),
            }),
        );
        let (webhook_secret, sealed) = self.new_runner_secret(runner.id);
        self.store
            .create_runner(&WriteContext::admin(cid), &runner, &key, &sealed, &event)
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
        cid: &CorrelationId,
    ) -> Result<(Uuid, Option<[u8; 32]>), ServiceError> {
        let runner = self
            .store
            .get_runner(runner_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such runner"))?;
        let pool = self.live_pool(runner.pool_id).await?;
        let workspace = self.workspace(pool.workspace_id).await?;
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
            created_at: Self::now(),
            revoked_at: None,
        };
        let event = admin_event(
            workspace.organisation_id,
            Some(pool.workspace_id),
            "runner.key_added",
            "runner",
            runner_id,
            cid,
            json!({ "keyId": key.id }),
        );
        self.store
            .add_runner_key(&WriteContext::admin(cid), &key, &event)
            .await?;
        Ok((key.id, private))
    }

    pub async fn revoke_runner_key(
        &self,
        runner_id: Uuid,
        key_id: Uuid,
        cid: &CorrelationId,
    ) -> Result<(), ServiceError> {
        let (_, pool, workspace) = self.runner_with_owners(runner_id).await?;
        let event = admin_event(
            workspace.organisation_id,
            Some(pool.workspace_id),
            "runner.key_revoked",
            "runner",
            runner_id,
            cid,
            json!({ "keyId": key_id }),
        );
        if self
            .store
            .revoke_runner_key(
                &WriteContext::admin(cid),
                runner_id,
                key_id,
                Self::now(),
                &event,
            )
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
    ) -> Result<(Runner, RunnerPool, crate::storage::Workspace), ServiceError> {
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

    pub(super) async fn workspace(
        &self,
        id: Uuid,
    ) -> Result<crate::storage::Workspace, ServiceError> {
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

    /// Queues a command on a live pool of the workspace, with its webhook delivery `pending`.
    pub async fn submit_command(
        &self,
        principal: &Principal,
        workspace: &str,
        input: SubmitCommandInput,
        write: &WriteContext,
    ) -> Result<(RunnerCommand, WebhookDelivery), ServiceError> {
        let permission = Permission::SubmitRunnerCommand {
            workspace,
            input: &input,
        };
        self.authorize_permission(principal, &permission).await?;
        let workspace_id =
            parse_uuid(workspace).ok_or_else(|| ServiceError::forbidden("no access"))?;
        if let Some(env) = input.environment_id {
            // A token limited to some environments reaches only those.
            if !principal.environment_ids.is_empty() && !principal.environment_ids.contains(&env) {
                return Err(ServiceError::forbidden(
                    "the token has no access to this environment",
                ));
            }
            let lookup = self
                .store
                .lookup_targets(principal.organisation_id, &[], &[env])
                .await?;
            if !lookup
                .environments
                .iter()
                .any(|(id, ws)| *id == env && *ws == workspace_id)
            {
                return Err(ServiceError::NotFound {
                    message: "no such environment in this workspace".into(),
                    details: Some(json!({ "field": "environmentId" })),
                });
            }
        } else if !principal.environment_ids.is_empty() {
            return Err(ServiceError::forbidden(
                "the token is limited to some environments; name one in environmentId",
            ));
        }
        let now = Self::now();
        let command = RunnerCommand {
            id: Uuid::new_v4(),
            workspace_id,
            pool_id: input.pool_id,
            environment_id: input.environment_id,
            command: input.command,
            args: input.args,
            timeout_seconds: input.timeout_seconds,
            status: CommandStatus::Queued,
            submitted_by: principal.user_id,
            created_at: now,
            updated_at: now,
            deadline_at: command_deadline(now, input.timeout_seconds),
        };
        let delivery = WebhookDelivery {
            id: Uuid::new_v4(),
            command_id: command.id,
            status: DeliveryStatus::Pending,
            detail: None,
            exit_code: None,
            created_at: now,
            updated_at: now,
        };
        // The command line and its arguments may carry anything (a password): the audit log
        // keeps the line's length and digest and the arguments' count, never their text. The
        // runner gets the text in its dispatch; the command's record keeps it.
        let (command_bytes, command_sha256) = text_digest(&command.command);
        let event = user_event(
            write,
            principal,
            workspace_id,
            "runner_command.submitted",
            "runner_command",
            command.id,
            json!({
                "poolId": command.pool_id,
                "commandBytes": command_bytes,
                "commandSha256": command_sha256,
                "argCount": command.args.len(),
                "environmentId": command.environment_id,
                "timeoutSeconds": command.timeout_seconds,
                "deliveryId": delivery.id,
            }),
        );
        match self
            .store
            .submit_command(write, &command, &delivery, &event)
            .await?
        {
            SubmitOutcome::Created => Ok((command, delivery)),
            SubmitOutcome::PoolNotFound => Err(ServiceError::NotFound {
                message: "no such runner pool in this workspace".into(),
                details: Some(json!({ "field": "poolId" })),
            }),
            SubmitOutcome::PoolDeleted => Err(ServiceError::Conflict {
                code: "pool_deleted",
                message: "the runner pool is deleted".into(),
                details: Some(json!({ "field": "poolId" })),
            }),
        }
    }

    /// Verifies a runner's signature: timestamp within tolerance, a live key of that runner
    /// looked up by id (never taken from the request), the exact message, then the nonce, which
    /// is spent only by a request whose signature verified.
    pub async fn authenticate_runner(
        &self,
        request: &SignedRequest<'_>,
    ) -> Result<RunnerPrincipal, ServiceError> {
        let sig = &request.signature;
        let now = chrono::Utc::now().timestamp();
        if (now - sig.timestamp).abs() > CLOCK_TOLERANCE_SECS {
            return Err(ServiceError::signature(format!(
                "x-sandbox-timestamp is more than {CLOCK_TOLERANCE_SECS} s from the server's clock"
            )));
        }
        let rejected = || {
            ServiceError::signature("the signature does not verify with a live key of this runner")
        };
        let Some(found) = self.store.find_runner_key(sig.key_id).await? else {
            return Err(rejected());
        };
        if found.key.runner_id != sig.runner_id || found.key.revoked_at.is_some() {
            return Err(rejected());
        }
        let key = <[u8; 32]>::try_from(found.key.public_key.as_slice())
            .ok()
            .and_then(|b| VerifyingKey::from_bytes(&b).ok())
            .ok_or_else(rejected)?;
        let message = signing_message(
            request.method,
            request.path,
            sig.timestamp,
            sig.nonce.as_str(),
            sig.runner_id,
            sig.key_id,
            &request.body_sha256,
        );
        // verify_strict refuses weak keys and malleable signatures.
        key.verify_strict(message.as_bytes(), &Signature::from_bytes(&sig.signature))
            .map_err(|_| rejected())?;
        let nonces = self.nonces.as_ref().ok_or(ServiceError::Unavailable)?;
        let fresh = nonces
            .store
            .remember(
                &keys::runner_nonce(&nonces.key_prefix, sig.runner_id, sig.nonce.as_str()),
                NONCE_TTL,
            )
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "nonce store unavailable");
                ServiceError::Unavailable
            })?;
        if !fresh {
            return Err(ServiceError::signature("x-sandbox-nonce was already used"));
        }
        Ok(RunnerPrincipal {
            runner_id: sig.runner_id,
            key_id: sig.key_id,
            pool_id: found.pool_id,
            workspace_id: found.workspace_id,
            organisation_id: found.organisation_id,
        })
    }

    /// Moves a delivery (and its command) through its state machine.
    pub async fn report_delivery_status(
        &self,
        runner: &RunnerPrincipal,
        delivery: &str,
        input: DeliveryStatusInput,
        write: &WriteContext,
    ) -> Result<WebhookDelivery, ServiceError> {
        // A delivery of another pool (or organisation) is answered exactly like one that does
        // not exist, so a runner learns nothing about deliveries it may not touch.
        let not_found = || ServiceError::not_found("no such delivery");
        let delivery_id = parse_uuid(delivery).ok_or_else(not_found)?;
        let context = self
            .store
            .get_delivery(delivery_id)
            .await?
            .filter(|c| c.pool_id == runner.pool_id)
            .ok_or_else(not_found)?;
        let from = context.delivery.status;
        let conflict = |message: String| ServiceError::Conflict {
            code: "invalid_transition",
            message,
            details: Some(json!({ "from": from.as_str(), "to": input.status.as_str() })),
        };
        if !context.command_status.is_open() {
            return Err(conflict(format!(
                "the command is {}; it takes no more reports",
                context.command_status
            )));
        }
        if !from.can_move_to(input.status) {
            return Err(conflict(format!(
                "a delivery cannot move from {from} to {}",
                input.status
            )));
        }
        let event = NewAuditEvent {
            organisation_id: context.organisation_id,
            workspace_id: Some(context.workspace_id),
            event_type: "webhook_delivery.status_reported",
            actor: write.actor(),
            target_kind: "webhook_delivery",
            target_id: delivery_id,
            correlation_id: write.correlation_id().to_string(),
            occurred_at: Self::now(),
            data: json!({
                "commandId": context.delivery.command_id,
                "from": from.as_str(),
                "to": input.status.as_str(),
                "exitCode": input.exit_code,
                "keyId": runner.key_id,
            }),
        };
        let transition = DeliveryTransition {
            delivery_id,
            from,
            to: input.status,
            detail: input.detail,
            exit_code: input.exit_code,
            at: Self::now(),
            event,
        };
        self.store
            .transition_delivery(write, &transition)
            .await?
            .ok_or_else(|| {
                conflict("the delivery or its command changed meanwhile; read it again".into())
            })
    }
}

impl Services {
    /// Fails every open command past its deadline (`timeoutSeconds` after submission) without
    /// a final report, with its delivery: each in a transaction of its own with one
    /// `runner_command.timed_out` event (actor `system`). Several replicas may sweep at once:
    /// the store applies each failure only from the state read here, so exactly one of them
    /// fails a command and writes its event.
    pub async fn time_out_overdue_commands(&self) -> Result<TimeoutSweep, ServiceError> {
        let now = Self::now();
        let overdue = self.store.overdue_commands(now, TIMEOUT_BATCH).await?;
        let more = overdue.len() as u64 >= u64::from(TIMEOUT_BATCH);
        let mut failed = 0;
        for command in overdue {
            let write = WriteContext::system();
            if let Some(timeout) = Self::timeout_of(&write, &command, now)
                && self.store.time_out_command(&write, &timeout).await?
            {
                tracing::info!(
                    command_id = %command.command_id,
                    timeout_seconds = command.timeout_seconds,
                    "runner command timed out"
                );
                failed += 1;
            }
        }
        Ok(TimeoutSweep { failed, more })
    }

    /// The failure of an overdue command, or `None` when its state machines allow none (it
    /// finished, or its delivery did, since the read).
    fn timeout_of(
        write: &WriteContext,
        command: &OverdueCommand,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<CommandTimeout> {
        let to = DeliveryStatus::Failed;
        if !command.status.is_open() || !command.delivery_status.can_move_to(to) {
            return None;
        }
        let detail = format!(
            "timed out: no final report within {} s of submission",
            command.timeout_seconds
        );
        let event = NewAuditEvent {
            organisation_id: command.organisation_id,
            workspace_id: Some(command.workspace_id),
            event_type: "runner_command.timed_out",
            actor: write.actor(),
            target_kind: "runner_command",
            target_id: command.command_id,
            correlation_id: write.correlation_id().to_string(),
            occurred_at: now,
            data: json!({
                "poolId": command.pool_id,
                "deliveryId": command.delivery_id,
                "from": command.status.as_str(),
                "to": to.command_status().as_str(),
                "deliveryFrom": command.delivery_status.as_str(),
                "timeoutSeconds": command.timeout_seconds,
                "deadlineAt": crate::domain::Timestamp::new(command.deadline_at),
                "reason": "timed out",
            }),
        };
        Some(CommandTimeout {
            command_id: command.command_id,
            from: command.status,
            delivery_from: command.delivery_status,
            to: to.command_status(),
            delivery_to: to,
            detail,
            at: now,
            event,
        })
    }
}
