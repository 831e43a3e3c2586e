//! Policy lifecycle: install, activate, roll back, remove, shadow, and the instance's webhook
//! signing keys; and the reload every replica runs when a change is announced.
//!
//! All of it is an operator's (the default policy's role table): the `admin_*` methods ask the
//! authorizer with the route's ids, then run the rules written once below, whose changes write
//! their audit event (naming the actor) in the acting operator's organisation's log, with no
//! workspace, in the change's own transaction. An event never holds a component's bytes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use uuid::Uuid;

use super::admin::event_by;
use super::directory::{AdminPage, Paged};
use super::permissions::admin_question;
use super::{Operation, ServiceError, Services};
use crate::domain::{
    FieldError, NewAuditEvent, Principal, WebhookPublicKey, WebhookSigner, parse_sequence,
};
use crate::policy::{CompiledPolicy, Instances, PolicyKind, PolicyRuntime, defaults};
use crate::storage::{DisagreementRecord, PolicyRecord, PolicyState, WriteContext};

/// `name@version`, parsed.
pub fn parse_reference(raw: &str) -> Result<(String, i32), ServiceError> {
    let invalid = || {
        ServiceError::Validation(
            crate::domain::FieldError::new("policy", "expected NAME@VERSION").into(),
        )
    };
    let (name, version) = raw.rsplit_once('@').ok_or_else(invalid)?;
    let version = version
        .parse::<i32>()
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(invalid)?;
    if name.is_empty() {
        return Err(invalid());
    }
    Ok((name.to_owned(), version))
}

/// What the decision log and metrics call an active policy: its name and version, or the
/// built-in default's.
fn policy_name(record: Option<&PolicyRecord>) -> crate::policy::PolicyName {
    record.map_or_else(crate::policy::PolicyName::built_in, |r| {
        crate::policy::PolicyName::installed(&r.name, r.version)
    })
}

/// Compiled policies by digest, memory budget and instances mode: a version is compiled once
/// per process.
#[derive(Default)]
pub struct CompiledCache(Mutex<HashMap<String, Arc<CompiledPolicy>>>);

/// A change's event: on the version, in `log` (the acting operator's organisation), no
/// workspace.
pub(super) fn policy_event(
    write: &WriteContext,
    log: Uuid,
    event_type: &'static str,
    policy: &PolicyRecord,
    mut data: Value,
) -> NewAuditEvent {
    if let Value::Object(map) = &mut data {
        map.insert("name".into(), json!(policy.name));
        map.insert("version".into(), json!(policy.version));
        map.insert("kind".into(), json!(policy.kind));
        map.insert("digest".into(), json!(policy.digest));
    }
    event_by(write, log, None, event_type, "policy", policy.id, data)
}

/// A page of a list whose cursor is not an id (newest-first logs, keys): `rows` read with
/// `page.fetch()`, its cursor made from the last item kept.
pub(super) fn paged<T>(
    page: AdminPage,
    mut rows: Vec<T>,
    cursor: impl Fn(&T) -> String,
) -> Paged<T> {
    let limit = page.fetch() as usize - 1;
    let mut next_cursor = None;
    if rows.len() > limit {
        rows.truncate(limit);
        next_cursor = rows.last().map(cursor);
    }
    Paged {
        items: rows,
        next_cursor,
    }
}

fn bad_cursor() -> ServiceError {
    ServiceError::Validation(FieldError::new("cursor", "is not a cursor this server issued").into())
}

/// The policies listed, with what is in force.
#[derive(Debug, Clone)]
pub struct PolicyListing {
    pub page: Paged<PolicyRecord>,
    pub state: PolicyState,
}

/// One disagreement of the shadow authorizer, with the id its page's cursor names.
pub type Disagreement = DisagreementRecord;

impl Services {
    fn runtime(&self) -> Result<&Arc<PolicyRuntime>, ServiceError> {
        self.policies
            .as_ref()
            .ok_or_else(|| ServiceError::Internal("no policy runtime".into()))
    }

    pub fn policy_runtime(&self) -> Option<&Arc<PolicyRuntime>> {
        self.policies.as_ref()
    }

    /// The authorizer's answer for a policy operation on the route's ids (name, version).
    async fn admit_operator(
        &self,
        principal: &Principal,
        operation: Operation,
        name: Option<&str>,
        version: Option<&str>,
    ) -> Result<(), ServiceError> {
        let question = match name {
            Some(name) => admin_question(operation, name, version),
            None => vec![],
        };
        self.authorize(principal, operation, None, question).await
    }

    pub async fn list_policies(&self) -> Result<(Vec<PolicyRecord>, PolicyState), ServiceError> {
        Ok((
            self.store.list_policies().await?,
            self.store.policy_state().await?,
        ))
    }

    pub async fn find_policy(&self, reference: &str) -> Result<PolicyRecord, ServiceError> {
        let (name, version) = parse_reference(reference)?;
        self.store
            .find_policy(&name, version)
            .await?
            .ok_or_else(|| ServiceError::not_found(format!("no policy {name}@{version}")))
    }

    /// The version a route names; a version that is not a positive number names none.
    async fn policy_at(&self, name: &str, version: &str) -> Result<PolicyRecord, ServiceError> {
        let missing = || ServiceError::not_found(format!("no policy {name}@{version}"));
        let number = version
            .parse::<i32>()
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(missing)?;
        self.store
            .find_policy(name, number)
            .await?
            .ok_or_else(missing)
    }

    /// Activates a version within its measured budgets (`activate_policy_with` to force).
    pub async fn activate_policy(
        &self,
        reference: &str,
        write: &WriteContext,
        log: Uuid,
    ) -> Result<PolicyRecord, ServiceError> {
        Ok(self
            .activate_policy_with(reference, false, write, log)
            .await?
            .policy)
    }

    /// Returns what is active for `kind` after the rollback (`None`: the built-in default).
    pub async fn rollback_policy(
        &self,
        kind: PolicyKind,
        write: &WriteContext,
        log: Uuid,
    ) -> Result<Option<PolicyRecord>, ServiceError> {
        let event = |undone: &PolicyRecord| {
            policy_event(write, log, "policy.rolled_back", undone, json!({}))
        };
        match self
            .store
            .rollback_policy(write, kind.as_str(), &event)
            .await?
        {
            Some(now) => Ok(now),
            None => Err(ServiceError::Conflict {
                code: "conflict",
                message: format!(
                    "no {} activation to roll back: the built-in default is active",
                    kind.as_str()
                ),
                details: None,
            }),
        }
    }

    pub async fn remove_policy(
        &self,
        reference: &str,
        write: &WriteContext,
        log: Uuid,
    ) -> Result<PolicyRecord, ServiceError> {
        let policy = self.find_policy(reference).await?;
        self.remove_version(policy, write, log).await
    }

    async fn remove_version(
        &self,
        policy: PolicyRecord,
        write: &WriteContext,
        log: Uuid,
    ) -> Result<PolicyRecord, ServiceError> {
        let event = policy_event(write, log, "policy.removed", &policy, json!({}));
        if !self.store.remove_policy(write, policy.id, &event).await? {
            return Err(ServiceError::Conflict {
                code: "conflict",
                message:
                    "the policy was activated (it stays for rollback and audit) or is a shadow"
                        .into(),
                details: None,
            });
        }
        Ok(policy)
    }

    /// Starts (or with `None` stops) shadow evaluation of an authorizer.
    pub async fn shadow_policy(
        &self,
        reference: Option<&str>,
        write: &WriteContext,
        log: Uuid,
    ) -> Result<Option<PolicyRecord>, ServiceError> {
        let policy = match reference {
            Some(r) => Some(self.find_policy(r).await?),
            None => None,
        };
        self.set_shadow(policy, write, log).await
    }

    async fn set_shadow(
        &self,
        policy: Option<PolicyRecord>,
        write: &WriteContext,
        log: Uuid,
    ) -> Result<Option<PolicyRecord>, ServiceError> {
        if let Some(p) = &policy
            && p.kind != PolicyKind::Authorizer.as_str()
        {
            return Err(ServiceError::Validation(
                crate::domain::FieldError::new("policy", "only authorizers can run in shadow mode")
                    .into(),
            ));
        }
        // Stopping names the version that was in shadow (none: the event names no version).
        let event = match (&policy, self.store.policy_state().await?.shadow) {
            (Some(p), _) => policy_event(
                write,
                log,
                "policy.shadow_set",
                p,
                json!({ "shadow": true }),
            ),
            (None, Some(was)) => policy_event(
                write,
                log,
                "policy.shadow_set",
                &was,
                json!({ "shadow": false }),
            ),
            (None, None) => event_by(
                write,
                log,
                None,
                "policy.shadow_set",
                "policy",
                Uuid::nil(),
                json!({ "shadow": false }),
            ),
        };
        self.store
            .set_shadow(
                write,
                PolicyKind::Authorizer.as_str(),
                policy.as_ref(),
                &event,
            )
            .await?;
        Ok(policy)
    }

    /// The latest disagreements of the shadow authorizer, newest first.
    pub async fn shadow_report(&self, limit: u32) -> Result<Vec<DisagreementRecord>, ServiceError> {
        let rows = self.store.list_disagreements(None, limit).await?;
        Ok(rows.into_iter().map(|(_, d)| d).collect())
    }

    pub async fn admin_list_policies(
        &self,
        principal: &Principal,
        page: AdminPage,
    ) -> Result<PolicyListing, ServiceError> {
        self.admit_operator(principal, Operation::ListPolicies, None, None)
            .await?;
        let rows = self.store.policies_page(page.after(), page.fetch()).await?;
        Ok(PolicyListing {
            page: page.of(rows, |p| p.id),
            state: self.store.policy_state().await?,
        })
    }

    /// A version with its measurement (as this server's deadline judges it now).
    pub async fn admin_get_policy(
        &self,
        principal: &Principal,
        name: &str,
        version: &str,
    ) -> Result<(PolicyRecord, Option<crate::policy::BudgetReport>), ServiceError> {
        let operation = Operation::GetPolicy;
        self.admit_operator(principal, operation, Some(name), Some(version))
            .await?;
        let policy = self.policy_at(name, version).await?;
        let budget = self.policy_budget(&policy).await?;
        Ok((policy, budget))
    }

    pub async fn admin_activate_policy(
        &self,
        principal: &Principal,
        name: &str,
        version: &str,
        force: bool,
        write: &WriteContext,
    ) -> Result<super::ActivatedPolicy, ServiceError> {
        let operation = Operation::ActivatePolicy;
        self.admit_operator(principal, operation, Some(name), Some(version))
            .await?;
        let policy = self.policy_at(name, version).await?;
        self.activate_version(policy, force, write, principal.organisation_id)
            .await
    }

    pub async fn admin_remove_policy(
        &self,
        principal: &Principal,
        name: &str,
        version: &str,
        write: &WriteContext,
    ) -> Result<PolicyRecord, ServiceError> {
        let operation = Operation::RemovePolicy;
        self.admit_operator(principal, operation, Some(name), Some(version))
            .await?;
        let policy = self.policy_at(name, version).await?;
        self.remove_version(policy, write, principal.organisation_id)
            .await
    }

    pub async fn admin_roll_back_policy(
        &self,
        principal: &Principal,
        kind: PolicyKind,
        write: &WriteContext,
    ) -> Result<Option<PolicyRecord>, ServiceError> {
        self.admit_operator(principal, Operation::RollBackPolicy, None, None)
            .await?;
        self.rollback_policy(kind, write, principal.organisation_id)
            .await
    }

    /// `version`: `(name, version)` to shadow, `None` to stop.
    pub async fn admin_set_shadow_policy(
        &self,
        principal: &Principal,
        version: Option<(&str, &str)>,
        write: &WriteContext,
    ) -> Result<Option<PolicyRecord>, ServiceError> {
        self.admit_operator(principal, Operation::SetShadowPolicy, None, None)
            .await?;
        // An unknown version is a 404, as everywhere else an id names nothing.
        let policy = match version {
            Some((name, version)) => Some(self.policy_at(name, version).await?),
            None => None,
        };
        self.set_shadow(policy, write, principal.organisation_id)
            .await
    }

    /// Newest first; the cursor is the last disagreement's id.
    pub async fn admin_list_shadow_disagreements(
        &self,
        principal: &Principal,
        page: AdminPage,
        cursor: Option<&str>,
    ) -> Result<Paged<Disagreement>, ServiceError> {
        self.admit_operator(principal, Operation::ListShadowDisagreements, None, None)
            .await?;
        let before = match cursor.filter(|c| !c.is_empty()) {
            None => None,
            Some(c) => Some(parse_sequence(c).ok_or_else(bad_cursor)?),
        };
        let rows = self.store.list_disagreements(before, page.fetch()).await?;
        let page = paged(page, rows, |(id, _)| id.to_string());
        Ok(Paged {
            items: page.items.into_iter().map(|(_, d)| d).collect(),
            next_cursor: page.next_cursor,
        })
    }

    /// The keys webhooks to runners are signed with, current first: a handful by design, so
    /// paged in memory; the cursor is the last key's id. A cursor naming a key this server
    /// no longer holds (a rotation dropped it) ends the list; only a malformed one is refused.
    pub async fn admin_list_webhook_signing_keys(
        &self,
        principal: &Principal,
        page: AdminPage,
        cursor: Option<&str>,
    ) -> Result<Paged<WebhookPublicKey>, ServiceError> {
        self.admit_operator(principal, Operation::ListWebhookSigningKeys, None, None)
            .await?;
        let mut keys = self.webhook_signer().public_keys();
        if let Some(after) = cursor.filter(|c| !c.is_empty()) {
            if !WebhookSigner::is_key_id(after) {
                return Err(bad_cursor());
            }
            match keys.iter().position(|k| k.kid == after) {
                Some(at) => drop(keys.drain(..=at)),
                None => keys.clear(),
            }
        }
        keys.truncate(page.fetch() as usize);
        Ok(paged(page, keys, |k| k.kid.clone()))
    }

    /// Loads what the store says is in force into this process's runtime. Idempotent; called
    /// at start-up and whenever a change is announced.
    pub async fn reload_policies(&self) -> Result<i64, ServiceError> {
        let _one_at_a_time = self.reloading.lock().await;
        let cache = &self.compiled;
        let runtime = self.runtime()?;
        let state = self.store.policy_state().await?;
        let authorizer = self
            .compiled(cache, PolicyKind::Authorizer, state.authorizer.as_ref())
            .await?;
        let moderator = self
            .compiled(cache, PolicyKind::Moderator, state.moderator.as_ref())
            .await?;
        runtime.set_authorizer(authorizer, policy_name(state.authorizer.as_ref()));
        runtime.set_moderator(moderator, policy_name(state.moderator.as_ref()));
        let shadow = match &state.shadow {
            Some(record) => Some(
                self.compiled(cache, PolicyKind::Authorizer, Some(record))
                    .await?,
            ),
            None => None,
        };
        runtime.set_shadow(shadow);
        self.policy_reloads.send_modify(|n| *n += 1);
        Ok(state.generation)
    }

    async fn compiled(
        &self,
        cache: &CompiledCache,
        kind: PolicyKind,
        record: Option<&PolicyRecord>,
    ) -> Result<Arc<CompiledPolicy>, ServiceError> {
        let runtime = self.runtime()?;
        // A version runs under its own memory budget and instances mode: the same bytes under
        // another budget or mode are another compiled policy.
        let budget = self.memory_budget_of(record).await?;
        let instances = record.map_or(Instances::Fresh, |r| r.instances);
        let key = |digest: &str| format!("{digest}/{}/{instances}", budget.map_or(0, |b| b.mib()));
        let bytes = match record {
            Some(r) => {
                if let Some(hit) = cache
                    .0
                    .lock()
                    .ok()
                    .and_then(|c| c.get(&key(&r.digest)).cloned())
                {
                    return Ok(hit);
                }
                self.store.policy_bytes(r.id).await?.ok_or_else(|| {
                    ServiceError::Internal(format!("policy {} has no bytes", r.id))
                })?
            }
            None => match kind {
                PolicyKind::Authorizer => defaults::AUTHORIZER.to_vec(),
                PolicyKind::Moderator => defaults::MODERATOR.to_vec(),
            },
        };
        let digest = crate::policy::digest(&bytes);
        if let Some(hit) = cache
            .0
            .lock()
            .ok()
            .and_then(|c| c.get(&key(&digest)).cloned())
        {
            return Ok(hit);
        }
        let engine = runtime.engine().clone();
        let compiled = tokio::task::spawn_blocking(move || engine.compile(kind, &bytes))
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?
            .map_err(|e| {
                ServiceError::Internal(format!("stored policy {digest} does not compile: {e}"))
            })?;
        let compiled = match budget {
            Some(budget) => compiled.with_memory_budget(budget),
            None => compiled,
        };
        let compiled = Arc::new(compiled.with_instances(instances));
        if let Ok(mut c) = cache.0.lock() {
            c.insert(key(&digest), compiled.clone());
        }
        Ok(compiled)
    }
}
