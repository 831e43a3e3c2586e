//! Personal access tokens: authentication, issuance and per-workspace revocation.

use chrono::Duration;
use serde_json::json;
use uuid::Uuid;

use super::{AuthzRequest, Decision, DenyStatus, Operation, ServiceError, Services};
use crate::domain::{
    Actor, CorrelationId, ExpiresInDays, FieldError, NewAuditEvent, Principal, RevocationReason,
    Scopes, TokenName, TokenSecret, ValidationErrors, parse_uuid,
};
use crate::storage::{
    InsertTokenError, NewToken, RevokeGrant, RevokeOutcome, TargetLookup, TokenFilter, TokenRecord,
};

/// The audit event a per-workspace revocation writes in that workspace; its target is the
/// token. An open audit stream of the token ends at it (`service/audit.rs`).
pub(super) const GRANT_REVOKED: &str = "token.workspace_access_revoked";

/// A parsed issuance request: every field already satisfies the contract's constraints.
#[derive(Debug, Clone)]
pub struct IssueTokenInput {
    pub name: TokenName,
    pub scopes: Scopes,
    pub organisation_id: Uuid,
    /// At least one, duplicates removed, in the order given.
    pub workspace_ids: Vec<Uuid>,
    pub environment_ids: Vec<Uuid>,
    pub expires_in_days: ExpiresInDays,
}

impl IssueTokenInput {
    pub fn new(
        name: TokenName,
        scopes: Scopes,
        organisation_id: Uuid,
        workspace_ids: Vec<Uuid>,
        environment_ids: Vec<Uuid>,
        expires_in_days: ExpiresInDays,
    ) -> Result<Self, ValidationErrors> {
        if workspace_ids.is_empty() {
            return Err(FieldError::new("workspaceIds", "must contain at least 1 item").into());
        }
        Ok(Self {
            name,
            scopes,
            organisation_id,
            workspace_ids: dedup(workspace_ids),
            environment_ids: dedup(environment_ids),
            expires_in_days,
        })
    }
}

fn dedup(ids: Vec<Uuid>) -> Vec<Uuid> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.into_iter().filter(|id| seen.insert(*id)).collect()
}

/// A newly issued token: the only moment its secret is known.
#[derive(Debug, Clone)]
pub struct IssuedCredential {
    pub record: TokenRecord,
    pub prefix: String,
    pub secret: TokenSecret,
}

impl Services {
    /// Resolves a bearer token to its principal. Every failure is the same 401 to the caller;
    /// the log says which kind, never the token.
    pub async fn authenticate(&self, bearer: &str) -> Result<Principal, ServiceError> {
        let Ok((public_id, secret)) = TokenSecret::parse(bearer) else {
            tracing::info!(reason = "malformed", "authentication failed");
            return Err(ServiceError::Unauthenticated);
        };
        let Some(stored) = self.store.find_credential(public_id.as_str()).await? else {
            tracing::info!(reason = "unknown", prefix = %public_id.display_prefix(), "authentication failed");
            return Err(ServiceError::Unauthenticated);
        };
        if !self.hasher.verify(&secret, &stored.secret_hash) {
            tracing::info!(reason = "mismatch", prefix = %public_id.display_prefix(), "authentication failed");
            return Err(ServiceError::Unauthenticated);
        }
        match Self::live_principal(stored.token) {
            Some(principal) => Ok(principal),
            None => {
                tracing::info!(reason = "expired_or_revoked", prefix = %public_id.display_prefix(), "authentication failed");
                Err(ServiceError::Unauthenticated)
            }
        }
    }

    /// The token's record as it is now, when it still exists: to re-check a principal later,
    /// with the read authentication uses (an open audit stream does).
    pub(super) async fn current_token(
        &self,
        principal: &Principal,
    ) -> Result<Option<TokenRecord>, ServiceError> {
        Ok(self
            .store
            .find_credential(&principal.public_id)
            .await?
            .map(|stored| stored.token)
            .filter(|token| token.id == principal.token_id))
    }

    /// What a token may do now; `None` when it is revoked, expired or has no workspace left.
    pub(super) fn live_principal(token: TokenRecord) -> Option<Principal> {
        let live = token.revoked_at.is_none()
            && token.expires_at > Self::now()
            && !token.workspace_ids.is_empty();
        live.then(|| Principal {
            token_id: token.id,
            public_id: token.public_id,
            user_id: token.user_id,
            organisation_id: token.organisation_id,
            scopes: token
                .scopes
                .iter()
                .filter_map(|s| crate::domain::Scope::parse(s).ok())
                .collect(),
            workspace_ids: token.workspace_ids,
            environment_ids: token.environment_ids,
            expires_at: token.expires_at,
        })
    }

    /// Asks the active authorizer; a denial becomes a 403 or 404 with its reason, a policy that
    /// could not decide a 403 `policy_error`.
    pub async fn authorize(
        &self,
        principal: &Principal,
        operation: Operation,
        workspace: Option<&str>,
        resources: Vec<(&'static str, String)>,
    ) -> Result<(), ServiceError> {
        let request = AuthzRequest {
            principal,
            operation,
            workspace,
            resources,
        };
        match self.authorizer.authorize(&request).await {
            Decision::Allow => Ok(()),
            Decision::Deny {
                status: DenyStatus::Forbidden,
                reason,
            } => Err(ServiceError::forbidden(reason)),
            Decision::Deny {
                status: DenyStatus::NotFound,
                reason,
            } => Err(ServiceError::not_found(reason)),
            Decision::Failed { .. } => Err(ServiceError::PolicyError),
        }
    }

    /// Issues a token for the caller's own user. Never an escalation: the new token's
    /// organisation, workspaces, environments and scopes are all within the caller's.
    pub async fn issue_token(
        &self,
        principal: &Principal,
        input: IssueTokenInput,
        correlation_id: &CorrelationId,
    ) -> Result<IssuedCredential, ServiceError> {
        self.authorize(principal, Operation::IssueToken, None, vec![])
            .await?;
        let found = self.check_targets_exist(&input).await?;

        if input.organisation_id != principal.organisation_id {
            return Err(ServiceError::forbidden(
                "the organisation is not the caller's",
            ));
        }
        let foreign: Vec<Uuid> = input
            .workspace_ids
            .iter()
            .copied()
            .filter(|w| !principal.has_workspace(*w))
            .collect();
        if !foreign.is_empty() {
            return Err(ServiceError::Forbidden {
                reason: "the caller's token has no access to some of these workspaces".into(),
                details: Some(json!({ "field": "workspaceIds", "workspaceIds": foreign })),
            });
        }
        let missing = input.scopes.missing_from(&principal.scopes);
        if !missing.is_empty() {
            let missing: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
            return Err(ServiceError::Forbidden {
                reason: "a token cannot grant scopes its issuer lacks".into(),
                details: Some(json!({ "field": "scopes", "scopes": missing })),
            });
        }
        if !principal.environment_ids.is_empty() {
            // A caller limited to some environments may not issue an unlimited token.
            let outside: Vec<Uuid> = input
                .environment_ids
                .iter()
                .copied()
                .filter(|e| !principal.environment_ids.contains(e))
                .collect();
            if input.environment_ids.is_empty() || !outside.is_empty() {
                return Err(ServiceError::Forbidden {
                    reason: "the caller's token is limited to other environments".into(),
                    details: Some(json!({ "field": "environmentIds", "environmentIds": outside })),
                });
            }
        }
        self.insert_token(
            principal.user_id,
            input,
            Some(principal.token_id),
            &found,
            Actor::user(principal.user_id),
            correlation_id,
        )
        .await
    }

    /// Issues a token for any user of the organisation: the admin CLI's path, which skips the
    /// caller-based escalation checks but keeps every other rule.
    pub async fn issue_token_for_user(
        &self,
        user_id: Uuid,
        input: IssueTokenInput,
        correlation_id: &CorrelationId,
    ) -> Result<IssuedCredential, ServiceError> {
        let user = self
            .store
            .get_user(user_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such user"))?;
        let found = self.check_targets_exist(&input).await?;
        if user.organisation_id != input.organisation_id {
            return Err(ServiceError::forbidden(
                "the user does not belong to this organisation",
            ));
        }
        self.insert_token(user.id, input, None, &found, Actor::admin(), correlation_id)
            .await
    }

    /// 404 for an unknown organisation, workspace or environment, or an environment outside
    /// the given workspaces; 403 for a workspace of another organisation.
    async fn check_targets_exist(
        &self,
        input: &IssueTokenInput,
    ) -> Result<TargetLookup, ServiceError> {
        let found = self
            .store
            .lookup_targets(
                input.organisation_id,
                &input.workspace_ids,
                &input.environment_ids,
            )
            .await?;
        if !found.organisation_exists {
            return Err(ServiceError::NotFound {
                message: "no such organisation".into(),
                details: Some(json!({ "field": "organisationId", "value": input.organisation_id })),
            });
        }
        let unknown: Vec<Uuid> = input
            .workspace_ids
            .iter()
            .copied()
            .filter(|w| !found.workspaces.iter().any(|(id, _)| id == w))
            .collect();
        if !unknown.is_empty() {
            return Err(ServiceError::NotFound {
                message: "no such workspace".into(),
                details: Some(json!({ "field": "workspaceIds", "workspaceIds": unknown })),
            });
        }
        if found
            .workspaces
            .iter()
            .any(|(_, org)| *org != input.organisation_id)
        {
            return Err(ServiceError::forbidden(
                "a workspace belongs to another organisation",
            ));
        }
        let stray: Vec<Uuid> = input
            .environment_ids
            .iter()
            .copied()
            .filter(|e| {
                !found
                    .environments
                    .iter()
                    .any(|(id, ws)| id == e && input.workspace_ids.contains(ws))
            })
            .collect();
        if !stray.is_empty() {
            return Err(ServiceError::NotFound {
                message: "no such environment in the given workspaces".into(),
                details: Some(json!({ "field": "environmentIds", "environmentIds": stray })),
            });
        }
        Ok(found)
    }

    async fn insert_token(
        &self,
        owner: Uuid,
        input: IssueTokenInput,
        issuer_token_id: Option<Uuid>,
        found: &TargetLookup,
        actor: Actor,
        correlation_id: &CorrelationId,
    ) -> Result<IssuedCredential, ServiceError> {
        let now = Self::now();
        let (public_id, secret) = TokenSecret::generate();
        let prefix = public_id.display_prefix();
        let record = TokenRecord {
            id: Uuid::new_v4(),
            public_id: public_id.as_str().to_owned(),
            user_id: owner,
            organisation_id: input.organisation_id,
            name: input.name.as_str().to_owned(),
            scopes: input.scopes.to_strings(),
            workspace_ids: input.workspace_ids,
            environment_ids: input.environment_ids,
            created_at: now,
            expires_at: now + Duration::days(input.expires_in_days.days()),
            revoked_at: None,
        };
        let events: Vec<NewAuditEvent> = record
            .workspace_ids
            .iter()
            .map(|ws| {
                // Readers of this workspace's activity must not learn about other workspaces.
                let environments: Vec<Uuid> = record
                    .environment_ids
                    .iter()
                    .copied()
                    .filter(|e| found.environments.iter().any(|(id, w)| id == e && w == ws))
                    .collect();
                NewAuditEvent {
                    organisation_id: record.organisation_id,
                    workspace_id: Some(*ws),
                    event_type: "token.issued",
                    actor,
                    target_kind: "token",
                    target_id: record.id,
                    correlation_id: correlation_id.to_string(),
                    occurred_at: now,
                    data: json!({
                        "tokenId": record.id,
                        "name": record.name,
                        "prefix": prefix,
                        "ownerId": owner,
                        "scopes": record.scopes,
                        "workspaceCount": record.workspace_ids.len(),
                        "environmentIds": environments,
                        "expiresAt": record.expires_at,
                    }),
                }
            })
            .collect();
        let token = NewToken {
            secret_hash: self.hasher.hash(&secret),
            record,
            issuer_token_id,
        };
        let limit = self.settings.max_active_tokens_per_user;
        match self.store.insert_token(&token, &events, limit, now).await {
            Ok(()) => {}
            Err(InsertTokenError::NameTaken) => {
                return Err(ServiceError::Conflict {
                    code: "conflict",
                    message: "an active token with this name already exists".into(),
                    details: Some(json!({ "field": "name" })),
                });
            }
            Err(InsertTokenError::LimitReached) => {
                return Err(ServiceError::Conflict {
                    code: "token_limit_reached",
                    message: format!(
                        "a user holds at most {limit} active tokens; revoke one first"
                    ),
                    details: Some(json!({ "limit": limit })),
                });
            }
            Err(InsertTokenError::IssuerLostAccess) => {
                return Err(ServiceError::forbidden(
                    "the caller's token lost access to a workspace during the request",
                ));
            }
            Err(InsertTokenError::Store(e)) => return Err(e.into()),
        }
        tracing::info!(token_id = %token.record.id, prefix = %prefix, "token issued");
        Ok(IssuedCredential {
            record: token.record,
            prefix,
            secret,
        })
    }

    /// Removes one token's access to one workspace; a token left with none is revoked.
    pub async fn revoke_token_access(
        &self,
        principal: &Principal,
        workspace: &str,
        token: &str,
        reason: RevocationReason,
        correlation_id: &CorrelationId,
    ) -> Result<RevokeOutcome, ServiceError> {
        self.authorize(
            principal,
            Operation::RevokeToken,
            Some(workspace),
            vec![("tokenId", token.to_owned())],
        )
        .await?;
        let workspace_id =
            parse_uuid(workspace).ok_or_else(|| ServiceError::forbidden("no access"))?;
        let token_id = parse_uuid(token)
            .ok_or_else(|| ServiceError::not_found("the token has no access to this workspace"))?;
        self.revoke_grant(
            principal.organisation_id,
            workspace_id,
            token_id,
            reason,
            Actor::user(principal.user_id),
            correlation_id,
        )
        .await
    }

    /// The admin CLI's revocation: no caller to authorize.
    pub async fn revoke_token_access_as_admin(
        &self,
        workspace_id: Uuid,
        token_id: Uuid,
        reason: RevocationReason,
        correlation_id: &CorrelationId,
    ) -> Result<RevokeOutcome, ServiceError> {
        let organisation_id = self
            .store
            .list_workspaces(None)
            .await?
            .into_iter()
            .find(|w| w.id == workspace_id)
            .map(|w| w.organisation_id)
            .ok_or_else(|| ServiceError::not_found("no such workspace"))?;
        self.revoke_grant(
            organisation_id,
            workspace_id,
            token_id,
            reason,
            Actor::admin(),
            correlation_id,
        )
        .await
    }

    async fn revoke_grant(
        &self,
        organisation_id: Uuid,
        workspace_id: Uuid,
        token_id: Uuid,
        reason: RevocationReason,
        actor: Actor,
        correlation_id: &CorrelationId,
    ) -> Result<RevokeOutcome, ServiceError> {
        let now = Self::now();
        let revoke = RevokeGrant {
            token_id,
            workspace_id,
            reason: reason.as_str().to_owned(),
            revoked_at: now,
            event: NewAuditEvent {
                organisation_id,
                workspace_id: Some(workspace_id),
                event_type: GRANT_REVOKED,
                actor,
                target_kind: "token",
                target_id: token_id,
                correlation_id: correlation_id.to_string(),
                occurred_at: now,
                data: json!({ "tokenId": token_id, "reason": reason.as_str() }),
            },
        };
        let outcome =
            self.store.revoke_grant(&revoke).await?.ok_or_else(|| {
                ServiceError::not_found("the token has no access to this workspace")
            })?;
        tracing::info!(%token_id, %workspace_id, token_revoked = outcome.token_revoked, "token access revoked");
        Ok(outcome)
    }

    pub async fn list_tokens(
        &self,
        filter: &TokenFilter,
    ) -> Result<Vec<TokenRecord>, ServiceError> {
        Ok(self.store.list_tokens(filter).await?)
    }
}
