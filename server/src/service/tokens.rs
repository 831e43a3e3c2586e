//! Personal access tokens: authentication, issuance and per-workspace revocation.

use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use uuid::Uuid;

use super::{AuthzRequest, Decision, DenyStatus, Operation, Permission, ServiceError, Services};
use crate::domain::{
    CorrelationId, ExpiresInDays, FieldError, NewAuditEvent, Principal, RevocationReason, Role,
    Scopes, Timestamp, TokenName, TokenSecret, ValidationErrors, parse_uuid,
};
use crate::storage::{
    InsertTokenError, NewToken, RevokeGrant, RevokeOutcome, StoredCredential, TargetLookup,
    TokenFilter, TokenRecord, User, WriteContext,
};

/// The audit event a per-workspace revocation writes in that workspace; its target is the
/// token. An open audit stream of the token ends at it (`service/audit.rs`).
pub(super) const GRANT_REVOKED: &str = "token.workspace_access_revoked";

/// The refusal of an operator-only operation to anyone else: the default policy's words, so
/// the answer is the same whichever refuses first.
const OPERATORS_ONLY: &str = "only an operator may do this";

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

/// The issuer's own limits, which a new token stays within: its workspaces (which a revocation
/// may have narrowed since), its scopes and its environments. 403 otherwise. Asked again
/// before a keyed repeat is answered with the stored credential (`service/permissions.rs`).
pub(super) fn within_issuer(
    principal: &Principal,
    input: &IssueTokenInput,
) -> Result<(), ServiceError> {
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
    Ok(())
}

fn dedup(ids: Vec<Uuid>) -> Vec<Uuid> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.into_iter().filter(|id| seen.insert(*id)).collect()
}

/// A token issued by a token never outlives its issuer: `min(now + days, issuer's expiry)`.
/// The request still succeeds when the cap shortens it; the response shows the capped expiry.
pub fn capped_expiry(
    now: DateTime<Utc>,
    days: ExpiresInDays,
    issuer_expires_at: Option<DateTime<Utc>>,
) -> DateTime<Utc> {
    let wanted = now + Duration::days(days.days());
    issuer_expires_at.map_or(wanted, |cap| wanted.min(cap))
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
        if !stored.usable_at(Self::now()) {
            tracing::info!(reason = "user_disabled_or_rotated", prefix = %public_id.display_prefix(), "authentication failed");
            return Err(ServiceError::Unauthenticated);
        }
        match Self::live_principal(stored) {
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
    ) -> Result<Option<StoredCredential>, ServiceError> {
        Ok(self
            .store
            .find_credential(&principal.public_id)
            .await?
            .filter(|stored| stored.usable_at(Self::now()))
            .filter(|stored| stored.token.id == principal.token_id))
    }

    /// What a token may do now; `None` when it is revoked, expired or has no workspace left.
    /// An admin scope its user's role no longer allows is not held: lowering a role cuts the
    /// user's admin power at the next request of each of its tokens, on every replica.
    pub(super) fn live_principal(stored: StoredCredential) -> Option<Principal> {
        let (token, role) = (stored.token, stored.user_role);
        let live = token.revoked_at.is_none()
            && token.expires_at > Self::now()
            && !token.workspace_ids.is_empty();
        live.then(|| Principal {
            token_id: token.id,
            public_id: token.public_id,
            user_id: token.user_id,
            organisation_id: token.organisation_id,
            role,
            scopes: token
                .scopes
                .iter()
                .filter_map(|s| crate::domain::Scope::parse(s).ok())
                .filter(|scope| role.allows(*scope))
                .collect(),
            workspace_ids: token.workspace_ids,
            environment_ids: token.environment_ids,
            expires_at: token.expires_at,
            correlation_id: None,
        })
    }

    /// Asks the active authorizer; a denial becomes a 403 or 404 with its reason, a policy that
    /// could not decide a 403 `policy_error`, a policy engine with no slot free a 503.
    ///
    /// An operator-only operation ([`Operation::operators_only`]) is refused to anyone but an
    /// operator first, with the default policy's own 403: a custom policy that allows it to an
    /// organisation's admin must not hand that admin the instance.
    pub async fn authorize(
        &self,
        principal: &Principal,
        operation: Operation,
        workspace: Option<&str>,
        resources: Vec<(&'static str, String)>,
    ) -> Result<(), ServiceError> {
        if operation.operators_only() && principal.role != Role::Operator {
            return Err(ServiceError::forbidden(OPERATORS_ONLY));
        }
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
            Decision::Unavailable { .. } => Err(ServiceError::Unavailable),
        }
    }

    /// Issues a token for the caller's own user. Never an escalation: the new token's
    /// organisation, workspaces, environments and scopes are all within the caller's.
    pub async fn issue_token(
        &self,
        principal: &Principal,
        input: IssueTokenInput,
        write: &WriteContext,
    ) -> Result<IssuedCredential, ServiceError> {
        self.authorize_permission(principal, &Permission::IssueToken(&input))
            .await?;
        // Another organisation and all it holds look exactly like ids that do not exist.
        let found = self
            .check_targets_exist(&input, Some(principal.organisation_id))
            .await?;
        within_issuer(principal, &input)?;
        self.insert_token(
            principal.user_id,
            input,
            Some((principal.token_id, principal.expires_at)),
            &found,
            write,
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
        let user = self.get_user(user_id).await?;
        self.issue_for(&user, input, &WriteContext::admin(correlation_id))
            .await
    }

    /// Issues a token for `user`, recorded as `write`'s actor: bounded by the user's role, not
    /// by a caller's token (an administrator issues what the user may hold).
    pub(super) async fn issue_for(
        &self,
        user: &User,
        input: IssueTokenInput,
        write: &WriteContext,
    ) -> Result<IssuedCredential, ServiceError> {
        let found = self.check_targets_exist(&input, None).await?;
        if user.organisation_id != input.organisation_id {
            return Err(ServiceError::forbidden(
                "the user does not belong to this organisation",
            ));
        }
        // Through the API the issuer's own scopes bound this (authentication drops what the
        // role disallows); here nothing else does.
        if let Some(scope) = input.scopes.iter().find(|s| !user.role.allows(*s)) {
            return Err(ServiceError::forbidden(format!(
                "the user's role ({}) does not allow the scope {scope}",
                user.role
            )));
        }
        self.insert_token(user.id, input, None, &found, write).await
    }

    /// 404 for an unknown organisation, workspace or environment, an environment outside the
    /// given workspaces, or anything of another organisation than `visible` (the caller's,
    /// `None` for cpctl) or than the requested one: the same status, code, message and details
    /// as an id that does not exist, so no caller can probe which ids exist elsewhere.
    async fn check_targets_exist(
        &self,
        input: &IssueTokenInput,
        visible: Option<Uuid>,
    ) -> Result<TargetLookup, ServiceError> {
        let found = self
            .store
            .lookup_targets(
                input.organisation_id,
                &input.workspace_ids,
                &input.environment_ids,
            )
            .await?;
        if !found.organisation_exists || visible.is_some_and(|org| org != input.organisation_id) {
            return Err(ServiceError::NotFound {
                message: "no such organisation".into(),
                details: Some(json!({ "field": "organisationId", "value": input.organisation_id })),
            });
        }
        let unknown: Vec<Uuid> = input
            .workspace_ids
            .iter()
            .copied()
            .filter(|w| {
                !found
                    .workspaces
                    .iter()
                    .any(|(id, org)| id == w && *org == input.organisation_id)
            })
            .collect();
        if !unknown.is_empty() {
            return Err(ServiceError::NotFound {
                message: "no such workspace".into(),
                details: Some(json!({ "field": "workspaceIds", "workspaceIds": unknown })),
            });
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
        issuer: Option<(Uuid, DateTime<Utc>)>,
        found: &TargetLookup,
        write: &WriteContext,
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
            expires_at: capped_expiry(now, input.expires_in_days, issuer.map(|(_, at)| at)),
            revoked_at: None,
            issued_by_token_id: issuer.map(|(id, _)| id),
            last_use: None,
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
                    actor: write.actor(),
                    target_kind: "token",
                    target_id: record.id,
                    correlation_id: write.correlation_id().to_string(),
                    occurred_at: now,
                    data: json!({
                        "tokenId": record.id,
                        "name": record.name,
                        "prefix": prefix,
                        "ownerId": owner,
                        "scopes": record.scopes,
                        "workspaceCount": record.workspace_ids.len(),
                        "environmentIds": environments,
                        "expiresAt": Timestamp::new(record.expires_at),
                        "issuedByTokenId": record.issued_by_token_id,
                    }),
                }
            })
            .collect();
        let token = NewToken {
            secret_hash: self.hasher.hash(&secret),
            record,
        };
        let limit = self.settings.max_active_tokens_per_user;
        match self
            .store
            .insert_token(write, &token, &events, limit, now)
            .await
        {
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

    /// Removes one token's access to one workspace; a token left with none is revoked. With
    /// `cascade`, every descendant (tokens issued by it, transitively) holding that workspace
    /// loses it too, in the same transaction.
    ///
    /// A caller limited to some environments may revoke only tokens limited to environments
    /// within its own (a token with no environment limit reaches every environment, so it is
    /// outside a limited caller): 403 otherwise. Descendants need no check: issuance keeps a
    /// child's environments within its issuer's.
    pub async fn revoke_token_access(
        &self,
        principal: &Principal,
        workspace: &str,
        token: &str,
        reason: RevocationReason,
        cascade: bool,
        write: &WriteContext,
    ) -> Result<RevokeOutcome, ServiceError> {
        self.authorize_permission(principal, &Permission::RevokeToken { workspace, token })
            .await?;
        let workspace_id =
            parse_uuid(workspace).ok_or_else(|| ServiceError::forbidden("no access"))?;
        let token_id = parse_uuid(token).ok_or_else(no_grant)?;
        if !principal.environment_ids.is_empty() {
            // Only a token with a live grant on this workspace (so of the caller's organisation)
            // is found: any other is the same 404 as an unknown id.
            let target = self
                .store
                .list_tokens(&TokenFilter {
                    token_id: Some(token_id),
                    workspace_id: Some(workspace_id),
                    ..TokenFilter::default()
                })
                .await?
                .into_iter()
                .next()
                .ok_or_else(no_grant)?;
            let within = !target.environment_ids.is_empty()
                && target
                    .environment_ids
                    .iter()
                    .all(|e| principal.environment_ids.contains(e));
            if !within {
                return Err(ServiceError::forbidden(
                    "the caller's token is limited to other environments than this token's",
                ));
            }
        }
        self.revoke_grant(
            principal.organisation_id,
            Some(workspace_id),
            token_id,
            reason,
            cascade,
            write,
        )
        .await
    }

    /// The admin CLI's revocation: no caller to authorize. Without a workspace, the token loses
    /// every workspace (and, with `cascade`, so does every descendant).
    pub async fn revoke_token_access_as_admin(
        &self,
        workspace_id: Option<Uuid>,
        token_id: Uuid,
        reason: RevocationReason,
        cascade: bool,
        correlation_id: &CorrelationId,
    ) -> Result<RevokeOutcome, ServiceError> {
        let organisation_id = match workspace_id {
            Some(workspace_id) => self.workspace(workspace_id).await?.organisation_id,
            None => self.token_record(token_id).await?.organisation_id,
        };
        self.revoke_grant(
            organisation_id,
            workspace_id,
            token_id,
            reason,
            cascade,
            &WriteContext::admin(correlation_id),
        )
        .await
    }

    pub(super) async fn revoke_grant(
        &self,
        organisation_id: Uuid,
        workspace_id: Option<Uuid>,
        token_id: Uuid,
        reason: RevocationReason,
        cascade: bool,
        write: &WriteContext,
    ) -> Result<RevokeOutcome, ServiceError> {
        let now = Self::now();
        let revoke = RevokeGrant {
            token_id,
            workspace_id,
            reason: reason.as_str().to_owned(),
            revoked_at: now,
            cascade,
            event: NewAuditEvent {
                organisation_id,
                workspace_id,
                event_type: GRANT_REVOKED,
                actor: write.actor(),
                target_kind: "token",
                target_id: token_id,
                correlation_id: write.correlation_id().to_string(),
                occurred_at: now,
                data: json!({ "tokenId": token_id, "reason": reason.as_str() }),
            },
        };
        let outcome = self
            .store
            .revoke_grant(write, &revoke)
            .await?
            .ok_or_else(no_grant)?;
        tracing::info!(
            %token_id,
            workspace_id = ?workspace_id,
            token_revoked = outcome.token_revoked,
            descendants_revoked = outcome.descendants_revoked,
            "token access revoked"
        );
        Ok(outcome)
    }

    pub async fn list_tokens(
        &self,
        filter: &TokenFilter,
    ) -> Result<Vec<TokenRecord>, ServiceError> {
        Ok(self.store.list_tokens(filter).await?)
    }

    /// One token by id, whatever its state; 404 `no such token` when there is none.
    pub(super) async fn token_record(&self, token_id: Uuid) -> Result<TokenRecord, ServiceError> {
        let filter = TokenFilter {
            token_id: Some(token_id),
            ..TokenFilter::default()
        };
        self.store
            .list_tokens(&filter)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| ServiceError::not_found("no such token"))
    }
}

fn no_grant() -> ServiceError {
    ServiceError::not_found("the token has no access to this workspace")
}
