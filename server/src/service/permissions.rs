//! What a caller asks to do, asked of the authorizer the same way when an operation runs and
//! when a keyed repeat of it would be answered with the stored response.
//!
//! An idempotent replay (`http/idempotency/`) returns what the first run returned, a child
//! token's secret included. It is an answer like any other: it is given only to a caller that
//! may still perform the operation. So before a replay the authorizer is asked the operation's
//! question again (scopes, workspace membership, whatever the active policy decides), and
//! issuance re-checks that the requested token is still within the issuer's own limits
//! ([`within_issuer`](super::tokens::within_issuer)): a grant revoked since is what narrows
//! them. The caller itself is read again first, so a token revoked while its request ran gets
//! the 401 a fresh request would. Anything refused is answered as a fresh request would be
//! (401, 403, 404), and the stored response is not sent; the record stays, so a caller allowed
//! again gets it.
//!
//! Not asked again: rules that read the state the first run changed (the pool it deleted, the
//! grant it revoked, the active token count it raised) — a repeat must not fail because its own
//! first run succeeded — and the token's environment limits, which never change on a token. A
//! runner's signed report needs nothing more: its signature is verified against the runner's
//! live keys on every request, replays included, before the key is looked at.
//!
//! Every answer from a stored outcome is such a replay, wherever it is found: under the key at
//! the claim, and after the handler when an earlier attempt's commit landed late (the retry
//! failed on that attempt's change, or its own commit lost to it). A keyed request keeps its
//! question as a [`ReplayCheck`], owned, for the second case.

use super::{IssueTokenInput, Operation, ServiceError, Services, SubmitCommandInput};
use crate::domain::Principal;

/// One bearer-authenticated change as the caller asks it, with the ids from its path.
#[derive(Debug, Clone, Copy)]
pub enum Permission<'a> {
    IssueToken(&'a IssueTokenInput),
    RevokeToken {
        workspace: &'a str,
        token: &'a str,
    },
    DeleteRunnerPool {
        workspace: &'a str,
        pool: &'a str,
    },
    SubmitRunnerCommand {
        workspace: &'a str,
        input: &'a SubmitCommandInput,
    },
    RequestWorkflowApproval {
        workspace: &'a str,
        workflow: &'a str,
        revision: &'a str,
    },
    WriteReview {
        plugin: &'a str,
    },
    ReportReview {
        plugin: &'a str,
        review: &'a str,
    },
    /// A revocation of one of the caller's own user's tokens, by the id of its path.
    RevokeOwnToken {
        token: &'a str,
    },
    /// A change of the admin plane: the ids of its route, the organisation first.
    Admin {
        operation: Operation,
        organisation: &'a str,
        target: Option<&'a str>,
    },
}

/// The question of an admin-plane operation: no workspace (an administrator acts on its
/// organisation, not in a workspace it is granted), and the route's ids by name.
pub(super) fn admin_question(
    operation: Operation,
    organisation: &str,
    target: Option<&str>,
) -> Vec<(&'static str, String)> {
    operation
        .variables()
        .zip([Some(organisation), target])
        .filter_map(|(name, value)| Some((name, value?.to_owned())))
        .collect()
}

/// A [`Permission`] with nothing borrowed from its request: what [`Services::may_replay`] asks.
#[derive(Debug, Clone)]
pub struct ReplayCheck {
    operation: Operation,
    workspace: Option<String>,
    resources: Vec<(&'static str, String)>,
    /// For issuance: the request, re-checked against the issuer's current limits.
    issuance: Option<IssueTokenInput>,
}

impl Permission<'_> {
    /// The question to ask again before a stored outcome of this request is answered.
    pub fn replay_check(&self) -> ReplayCheck {
        let (operation, workspace, resources) = self.question();
        ReplayCheck {
            operation,
            workspace: workspace.map(str::to_owned),
            resources,
            issuance: match self {
                Permission::IssueToken(input) => Some((*input).clone()),
                _ => None,
            },
        }
    }

    /// The authorizer's question: the operation, the workspace and the other resources named.
    fn question(&self) -> (Operation, Option<&str>, Vec<(&'static str, String)>) {
        let own = |s: &str| s.to_owned();
        match *self {
            Permission::IssueToken(_) => (Operation::IssueToken, None, vec![]),
            Permission::RevokeToken { workspace, token } => (
                Operation::RevokeToken,
                Some(workspace),
                vec![("tokenId", own(token))],
            ),
            Permission::DeleteRunnerPool { workspace, pool } => (
                Operation::DeleteRunnerPool,
                Some(workspace),
                vec![("poolId", own(pool))],
            ),
            Permission::SubmitRunnerCommand { workspace, input } => {
                let mut resources = vec![("poolId", input.pool_id.to_string())];
                if let Some(env) = input.environment_id {
                    resources.push(("environmentId", env.to_string()));
                }
                (Operation::SubmitRunnerCommand, Some(workspace), resources)
            }
            Permission::RequestWorkflowApproval {
                workspace,
                workflow,
                revision,
            } => (
                Operation::RequestWorkflowApproval,
                Some(workspace),
                vec![("workflowId", own(workflow)), ("revisionId", own(revision))],
            ),
            Permission::WriteReview { plugin } => (
                Operation::WriteReview,
                None,
                vec![("pluginId", own(plugin))],
            ),
            Permission::ReportReview { plugin, review } => (
                Operation::ReportReview,
                None,
                vec![("pluginId", own(plugin)), ("reviewId", own(review))],
            ),
            Permission::RevokeOwnToken { token } => (
                Operation::RevokeOwnToken,
                None,
                vec![("tokenId", own(token))],
            ),
            Permission::Admin {
                operation,
                organisation,
                target,
            } => (
                operation,
                None,
                admin_question(operation, organisation, target),
            ),
        }
    }
}

impl Services {
    /// Asks the active authorizer whether `principal` may do what `permission` names: every
    /// operation's first check.
    pub(super) async fn authorize_permission(
        &self,
        principal: &Principal,
        permission: &Permission<'_>,
    ) -> Result<(), ServiceError> {
        let (operation, workspace, resources) = permission.question();
        self.authorize(principal, operation, workspace, resources)
            .await
    }

    /// Whether the stored response of a keyed request may be given to `principal` now: its
    /// token read again, then the authorizer's answer, and for issuance the issuer's current
    /// limits (module doc).
    ///
    /// The token is read again because `principal` is as the request authenticated it, and an
    /// outcome found after the handler (a late commit) comes up to the handler's deadline
    /// later: a revocation, a disable or a lost grant in between must be seen. One indexed
    /// read per replay; replays are retries, rare beside first attempts.
    pub async fn may_replay(
        &self,
        principal: &Principal,
        check: &ReplayCheck,
    ) -> Result<(), ServiceError> {
        let current = self
            .current_token(principal)
            .await?
            .and_then(Self::live_principal)
            .ok_or(ServiceError::Unauthenticated)?;
        let principal = &Principal {
            correlation_id: principal.correlation_id.clone(),
            ..current
        };
        let workspace = check.workspace.as_deref();
        self.authorize(
            principal,
            check.operation,
            workspace,
            check.resources.clone(),
        )
        .await?;
        if let Some(input) = &check.issuance {
            super::tokens::within_issuer(principal, input)?;
        }
        Ok(())
    }
}
