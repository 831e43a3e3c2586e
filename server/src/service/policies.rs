//! Policy lifecycle: install, activate, roll back, remove, shadow; and the reload every
//! replica runs when a change is announced.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{ServiceError, Services};
use crate::domain::CorrelationId;
use crate::policy::{CompiledPolicy, PolicyKind, PolicyRuntime, defaults};
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

/// Compiled policies by digest: a version is compiled once per process.
#[derive(Default)]
pub struct CompiledCache(Mutex<HashMap<String, Arc<CompiledPolicy>>>);

impl Services {
    fn runtime(&self) -> Result<&Arc<PolicyRuntime>, ServiceError> {
        self.policies
            .as_ref()
            .ok_or_else(|| ServiceError::Internal("no policy runtime".into()))
    }

    pub fn policy_runtime(&self) -> Option<&Arc<PolicyRuntime>> {
        self.policies.as_ref()
    }

    /// Validates the component against the world of `kind`, measures it on the shipped cases
    /// under the server's memory budget, then stores it as the next version.
    pub async fn install_policy(
        &self,
        name: &str,
        kind: PolicyKind,
        bytes: &[u8],
    ) -> Result<PolicyRecord, ServiceError> {
        Ok(self
            .install_measured_policy(name, kind, bytes, None, None)
            .await?
            .policy)
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

    /// Activates a version within its measured budgets (`activate_policy_with` to force).
    pub async fn activate_policy(&self, reference: &str) -> Result<PolicyRecord, ServiceError> {
        Ok(self.activate_policy_with(reference, false).await?.policy)
    }

    /// Returns what is active for `kind` after the rollback (`None`: the built-in default).
    pub async fn rollback_policy(
        &self,
        kind: PolicyKind,
    ) -> Result<Option<PolicyRecord>, ServiceError> {
        if !self
            .store
            .rollback_policy(
                &WriteContext::admin(&CorrelationId::generate()),
                kind.as_str(),
            )
            .await?
        {
            return Err(ServiceError::Conflict {
                code: "conflict",
                message: format!(
                    "no {} activation to roll back: the built-in default is active",
                    kind.as_str()
                ),
                details: None,
            });
        }
        let state = self.store.policy_state().await?;
        Ok(match kind {
            PolicyKind::Authorizer => state.authorizer,
            PolicyKind::Moderator => state.moderator,
        })
    }

    pub async fn remove_policy(&self, reference: &str) -> Result<PolicyRecord, ServiceError> {
        let policy = self.find_policy(reference).await?;
        if !self.store.remove_policy(policy.id).await? {
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
    ) -> Result<Option<PolicyRecord>, ServiceError> {
        let policy = match reference {
            Some(r) => Some(self.find_policy(r).await?),
            None => None,
        };
        if let Some(p) = &policy
            && p.kind != PolicyKind::Authorizer.as_str()
        {
            return Err(ServiceError::Validation(
                crate::domain::FieldError::new("policy", "only authorizers can run in shadow mode")
                    .into(),
            ));
        }
        self.store
            .set_shadow(
                &WriteContext::admin(&CorrelationId::generate()),
                PolicyKind::Authorizer.as_str(),
                policy.as_ref(),
            )
            .await?;
        Ok(policy)
    }

    pub async fn shadow_report(&self, limit: u32) -> Result<Vec<DisagreementRecord>, ServiceError> {
        Ok(self.store.list_disagreements(limit).await?)
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
        // A version runs under its own memory budget: the same bytes under another budget
        // are another compiled policy.
        let budget = self.memory_budget_of(record).await?;
        let key = |digest: &str| format!("{digest}/{}", budget.map_or(0, |b| b.mib()));
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
        let compiled = Arc::new(match budget {
            Some(budget) => compiled.with_memory_budget(budget),
            None => compiled,
        });
        if let Ok(mut c) = cache.0.lock() {
            c.insert(key(&digest), compiled.clone());
        }
        Ok(compiled)
    }
}
