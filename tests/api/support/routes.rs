//! The v1 routes as the suite calls them, one function per operation, so each path is written
//! once (a renamed route is one edit here, not one per test). Black-box on purpose: these are
//! the contract's paths, not `control_plane::domain::operation`'s table, which the tests check.
//! The document's templates (`{workspaceId}`) stay literal where a test reads the document.

use std::fmt::Display;

/// `POST` issues a personal access token.
pub const ISSUE_TOKEN: &str = "/v1/personal-access-tokens";

/// `GET` tells a token who it is.
pub const ME: &str = "/v1/me";

/// `GET` lists the tokens of the caller's own user.
pub const OWN_TOKENS: &str = "/v1/me/tokens";

/// `POST` revokes `token`, one of the caller's own user's.
pub fn revoke_own_token(token: impl Display) -> String {
    format!("/v1/me/tokens/{token}/revoke")
}

/// `DELETE` revokes `token`'s access to `workspace`.
pub fn revoke_token(workspace: impl Display, token: impl Display) -> String {
    format!("/v1/workspaces/{workspace}/access-tokens/{token}")
}

/// `DELETE` deletes the pool.
pub fn runner_pool(workspace: impl Display, pool: impl Display) -> String {
    format!("/v1/workspaces/{workspace}/runner-pools/{pool}")
}

/// `POST` submits a runner command.
pub fn runner_commands(workspace: impl Display) -> String {
    format!("/v1/workspaces/{workspace}/runner-commands")
}

/// `GET` streams the workspace's audit events.
pub fn audit_stream(workspace: impl Display) -> String {
    format!("/v1/workspaces/{workspace}/audit/stream")
}

/// `GET` lists the workspace's activity.
pub fn activity(workspace: impl Display) -> String {
    format!("/v1/workspaces/{workspace}/activity")
}

/// `POST` a runner's signed status report on a delivery.
pub fn delivery_status(delivery: impl Display) -> String {
    format!("/v1/runner/webhook-deliveries/{delivery}/status")
}

/// `POST` requests approval of a workflow revision.
pub fn request_approval(
    workspace: impl Display,
    workflow: impl Display,
    revision: impl Display,
) -> String {
    format!("/v1/workspaces/{workspace}/workflows/{workflow}/revisions/{revision}/request-approval")
}

/// `POST` reports a review.
pub fn report_review(plugin: impl Display, review: impl Display) -> String {
    format!("/v1/marketplace/plugins/{plugin}/reviews/{review}/report")
}

/// `PUT` creates or replaces the caller's own review.
pub fn own_review(plugin: impl Display) -> String {
    format!("/v1/marketplace/plugins/{plugin}/reviews/me")
}

/// `POST` creates a user of the organisation; `GET` lists them.
pub fn users(organisation: impl Display) -> String {
    format!("/v1/organisations/{organisation}/users")
}

/// `GET` shows the user with its tokens.
pub fn user(organisation: impl Display, user: impl Display) -> String {
    format!("/v1/organisations/{organisation}/users/{user}")
}

/// `POST` disables the user.
pub fn disable_user(organisation: impl Display, user: impl Display) -> String {
    format!("/v1/organisations/{organisation}/users/{user}/disable")
}

/// `POST` enables the user.
pub fn enable_user(organisation: impl Display, user: impl Display) -> String {
    format!("/v1/organisations/{organisation}/users/{user}/enable")
}

/// `PUT` sets the user's role.
pub fn user_role(organisation: impl Display, user: impl Display) -> String {
    format!("/v1/organisations/{organisation}/users/{user}/role")
}

/// `POST` creates an organisation; `GET` lists them (an operator's).
pub const ORGANISATIONS: &str = "/v1/organisations";

/// `POST` creates a workspace of the organisation; `GET` lists them.
pub fn workspaces(organisation: impl Display) -> String {
    format!("/v1/organisations/{organisation}/workspaces")
}

/// `POST` creates an environment of the workspace; `GET` lists them.
pub fn environments(organisation: impl Display, workspace: impl Display) -> String {
    format!("/v1/organisations/{organisation}/workspaces/{workspace}/environments")
}

/// `POST` issues a token for the user.
pub fn user_tokens(organisation: impl Display, user: impl Display) -> String {
    format!("/v1/organisations/{organisation}/users/{user}/tokens")
}

/// `GET` lists the organisation's tokens.
pub fn tokens(organisation: impl Display) -> String {
    format!("/v1/organisations/{organisation}/tokens")
}

/// `GET` shows the token.
pub fn token(organisation: impl Display, token: impl Display) -> String {
    format!("/v1/organisations/{organisation}/tokens/{token}")
}

/// `POST` revokes the token (one workspace's access, or all of it).
pub fn admin_revoke_token(organisation: impl Display, token: impl Display) -> String {
    format!("/v1/organisations/{organisation}/tokens/{token}/revoke")
}

/// `POST` rotates the token's secret.
pub fn rotate_token(organisation: impl Display, token: impl Display) -> String {
    format!("/v1/organisations/{organisation}/tokens/{token}/rotate")
}

/// `GET` lists the pool's deliveries, newest first.
pub fn deliveries(organisation: impl Display, pool: impl Display) -> String {
    format!("/v1/organisations/{organisation}/runner-pools/{pool}/deliveries")
}

/// `POST` resends the pool's deliveries that failed since a time.
pub fn recover_deliveries(organisation: impl Display, pool: impl Display) -> String {
    format!("/v1/organisations/{organisation}/runner-pools/{pool}/deliveries/recover")
}

/// `GET` shows the delivery and its attempts.
pub fn delivery(organisation: impl Display, delivery: impl Display) -> String {
    format!("/v1/organisations/{organisation}/deliveries/{delivery}")
}

/// `POST` resends the delivery.
pub fn resend_delivery(organisation: impl Display, delivery: impl Display) -> String {
    format!("/v1/organisations/{organisation}/deliveries/{delivery}/resend")
}

/// `POST` creates a workflow in the workspace; `GET` lists them.
pub fn workflows(organisation: impl Display, workspace: impl Display) -> String {
    format!("/v1/organisations/{organisation}/workspaces/{workspace}/workflows")
}

/// `POST` creates a revision of the workflow.
pub fn workflow_revisions(organisation: impl Display, workflow: impl Display) -> String {
    format!("/v1/organisations/{organisation}/workflows/{workflow}/revisions")
}

/// `POST` approves (`verb` = `approve`) or rejects (`reject`) the revision.
pub fn decide_revision(
    organisation: impl Display,
    workflow: impl Display,
    revision: impl Display,
    verb: &str,
) -> String {
    format!("/v1/organisations/{organisation}/workflows/{workflow}/revisions/{revision}/{verb}")
}

/// `PUT` allows or refuses self-approval in the organisation.
pub fn self_approval(organisation: impl Display) -> String {
    format!("/v1/organisations/{organisation}/self-approval")
}

/// `POST` creates a plugin the organisation publishes; `GET` lists them.
pub fn plugins(organisation: impl Display) -> String {
    format!("/v1/organisations/{organisation}/plugins")
}

/// `GET` lists the plugin's reviews, whatever their status.
pub fn plugin_reviews(organisation: impl Display, plugin: impl Display) -> String {
    format!("/v1/organisations/{organisation}/plugins/{plugin}/reviews")
}

/// `POST` restores the hidden review.
pub fn restore_review(
    organisation: impl Display,
    plugin: impl Display,
    review: impl Display,
) -> String {
    format!("/v1/organisations/{organisation}/plugins/{plugin}/reviews/{review}/restore")
}

/// `POST` creates a runner pool in the workspace; `GET` lists them.
pub fn runner_pools(organisation: impl Display, workspace: impl Display) -> String {
    format!("/v1/organisations/{organisation}/workspaces/{workspace}/runner-pools")
}

/// `POST` registers a runner in the pool; `GET` lists its runners.
pub fn pool_runners(organisation: impl Display, pool: impl Display) -> String {
    format!("/v1/organisations/{organisation}/runner-pools/{pool}/runners")
}

/// `DELETE` removes the runner; with a suffix (`/disable`, `/enable`, `/delivery-url`,
/// `/webhook-secret/rotate`, `/keys`), the runner's other operations.
pub fn runner(organisation: impl Display, runner: impl Display) -> String {
    format!("/v1/organisations/{organisation}/runners/{runner}")
}

/// `DELETE` revokes the runner's key.
pub fn runner_key(organisation: impl Display, runner: impl Display, key: impl Display) -> String {
    format!("/v1/organisations/{organisation}/runners/{runner}/keys/{key}")
}

/// `GET` exports the workspace's audit log (streamed).
pub fn audit_export(organisation: impl Display, workspace: impl Display) -> String {
    format!("/v1/organisations/{organisation}/workspaces/{workspace}/audit/export")
}

/// `GET` verifies the workspace's audit log.
pub fn audit_verification(organisation: impl Display, workspace: impl Display) -> String {
    format!("/v1/organisations/{organisation}/workspaces/{workspace}/audit/verification")
}

/// `PUT` sets the organisation's audit retention.
pub fn audit_retention(organisation: impl Display) -> String {
    format!("/v1/organisations/{organisation}/audit-retention")
}

/// `POST` runs a retention pass now.
pub const AUDIT_PURGE: &str = "/v1/audit/purge";

pub const POLICIES: &str = "/v1/policies";
pub const POLICY_ROLLBACK: &str = "/v1/policies/rollback";
pub const POLICY_SHADOW: &str = "/v1/policies/shadow";
pub const SHADOW_DISAGREEMENTS: &str = "/v1/policies/shadow/disagreements";
pub const POLICY_DECISIONS: &str = "/v1/policies/decisions";
pub const WEBHOOK_SIGNING_KEYS: &str = "/v1/webhook-signing-keys";

pub fn policy_version(name: &str, version: i32) -> String {
    format!("/v1/policies/{name}/versions/{version}")
}

pub fn activate_policy(name: &str, version: i32) -> String {
    format!("{}/activate", policy_version(name, version))
}
