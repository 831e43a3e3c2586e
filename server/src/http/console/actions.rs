//! The console's changes: each form's action, the admin operation it sends as the signed-in
//! token (with the form's idempotency key), and where the browser goes after it.

use poem::http::Method;
use serde_json::{Value, json};

use super::client::Failure;
use super::pages::{Ctx, Form, PageKind, invalid};
use super::text;
use super::views::{Content, Secret};
use crate::service::is_policy_name;

/// A change the console makes.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    IssueToken,
    IssueOwnToken,
    RevokeOwnToken,
    RevokeToken,
    RotateToken,
    DisableUser,
    EnableUser,
    SetRole,
    DisableRunner,
    EnableRunner,
    Resend,
    Activate,
    RollBack,
}

impl Action {
    pub fn at(path: &str) -> Option<Self> {
        Some(match path {
            "/console/tokens/issue" => Self::IssueToken,
            "/console/tokens/issue-own" => Self::IssueOwnToken,
            "/console/tokens/revoke-own" => Self::RevokeOwnToken,
            "/console/tokens/revoke" => Self::RevokeToken,
            "/console/tokens/rotate" => Self::RotateToken,
            "/console/users/disable" => Self::DisableUser,
            "/console/users/enable" => Self::EnableUser,
            "/console/users/role" => Self::SetRole,
            "/console/runners/disable" => Self::DisableRunner,
            "/console/runners/enable" => Self::EnableRunner,
            "/console/deliveries/resend" => Self::Resend,
            "/console/policies/activate" => Self::Activate,
            "/console/policies/rollback" => Self::RollBack,
            _ => return None,
        })
    }

    pub fn page(self) -> PageKind {
        match self {
            Self::IssueToken
            | Self::IssueOwnToken
            | Self::RevokeOwnToken
            | Self::RevokeToken
            | Self::RotateToken => PageKind::Tokens,
            Self::DisableUser | Self::EnableUser | Self::SetRole => PageKind::Users,
            Self::DisableRunner | Self::EnableRunner => PageKind::Runners,
            Self::Resend => PageKind::Deliveries,
            Self::Activate | Self::RollBack => PageKind::Policies,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Self::IssueToken | Self::IssueOwnToken => "Token issued",
            Self::RotateToken => "Token rotated",
            _ => self.page().title(),
        }
    }
}

pub enum Done {
    /// Go back to this console page.
    Back(String),
    /// Show this (a secret, shown once).
    Show(Content),
}

/// A console path to return to from a form: only the console's own pages.
fn safe_back(raw: &str) -> Option<String> {
    let page = raw.split('?').next()?;
    (PageKind::at(page).is_some() && !raw.contains(['\\', '\r', '\n'])).then(|| raw.to_owned())
}

fn issued(label: &str, credential: &Value) -> Done {
    Done::Show(Content {
        secret: Some(Secret {
            label: format!(
                "{label} {} ({})",
                text(&credential["name"]),
                text(&credential["id"])
            ),
            value: text(&credential["token"]),
        }),
        notice: Some(format!("Expires {}.", text(&credential["expiresAt"]))),
        ..Content::default()
    })
}

pub async fn act(ctx: &Ctx<'_>, action: Action, form: &Form) -> Result<Done, Failure> {
    let key = form.get("key");
    let post = |path: String, body: Value| ctx.send(Method::POST, path, body, key);
    let back_to = |page: &str| Done::Back(ctx.link(page, &[]));
    Ok(match action {
        Action::IssueToken => {
            let user = form.field_uuid("user")?;
            let days: i64 = form
                .get("days")
                .parse()
                .map_err(|_| invalid("days", "must be a number of days"))?;
            let body = json!({
                "name": form.get("name"),
                "scopes": form.all("scopes"),
                "workspaceIds": form.all("workspaces"),
                "expiresInDays": days,
            });
            let issued_now = post(ctx.org_path(&format!("/users/{user}/tokens")), body).await?;
            issued("New token", &issued_now["credential"])
        }
        Action::IssueOwnToken => {
            let days: i64 = form
                .get("days")
                .parse()
                .map_err(|_| invalid("days", "must be a number of days"))?;
            let body = json!({
                "name": form.get("name"),
                "scopes": form.all("scopes"),
                "organisationId": ctx.organisation(),
                "workspaceIds": form.all("workspaces"),
                "expiresInDays": days,
            });
            let issued_now = post("/v1/personal-access-tokens".into(), body).await?;
            issued("New token", &issued_now["credential"])
        }
        Action::RevokeOwnToken => {
            let token = form.field_uuid("token")?;
            post(
                format!("/v1/me/tokens/{token}/revoke"),
                json!({ "reason": form.get("reason") }),
            )
            .await?;
            back_to("/console/tokens")
        }
        Action::RevokeToken => {
            let token = form.field_uuid("token")?;
            post(
                ctx.org_path(&format!("/tokens/{token}/revoke")),
                json!({ "reason": form.get("reason") }),
            )
            .await?;
            back_to("/console/tokens")
        }
        Action::RotateToken => {
            let token = form.field_uuid("token")?;
            let grace: i64 = form
                .get("grace")
                .parse()
                .map_err(|_| invalid("grace", "must be a number of seconds"))?;
            let rotated = post(
                ctx.org_path(&format!("/tokens/{token}/rotate")),
                json!({ "graceSeconds": grace }),
            )
            .await?;
            issued("Rotated token", &rotated["credential"])
        }
        Action::DisableUser => {
            let user = form.field_uuid("user")?;
            let reason = form.get("reason");
            let body = if reason.is_empty() {
                json!({})
            } else {
                json!({ "reason": reason })
            };
            post(ctx.org_path(&format!("/users/{user}/disable")), body).await?;
            back_to("/console/users")
        }
        Action::EnableUser => {
            let user = form.field_uuid("user")?;
            post(ctx.org_path(&format!("/users/{user}/enable")), json!({})).await?;
            back_to("/console/users")
        }
        Action::SetRole => {
            let user = form.field_uuid("user")?;
            ctx.send(
                Method::PUT,
                ctx.org_path(&format!("/users/{user}/role")),
                json!({ "role": form.get("role") }),
                key,
            )
            .await?;
            back_to("/console/users")
        }
        Action::DisableRunner | Action::EnableRunner => {
            let runner = form.field_uuid("runner")?;
            let verb = if matches!(action, Action::DisableRunner) {
                "disable"
            } else {
                "enable"
            };
            post(
                ctx.org_path(&format!("/runners/{runner}/{verb}")),
                json!({}),
            )
            .await?;
            match safe_back(form.get("back")) {
                Some(to) => Done::Back(to),
                None => back_to("/console/runners"),
            }
        }
        Action::Resend => {
            let delivery = form.field_uuid("delivery")?;
            post(
                ctx.org_path(&format!("/deliveries/{delivery}/resend")),
                json!({}),
            )
            .await?;
            Done::Back(ctx.link("/console/delivery", &[("id", &delivery.to_string())]))
        }
        Action::Activate => {
            let name = form.get("name");
            if !is_policy_name(name) {
                return Err(invalid("name", "must be a policy name"));
            }
            let version: u32 = form
                .get("version")
                .parse()
                .map_err(|_| invalid("version", "must be a version number"))?;
            let force = form.get("force") == "true";
            post(
                format!("/v1/policies/{name}/versions/{version}/activate"),
                json!({ "force": force }),
            )
            .await?;
            back_to("/console/policies")
        }
        Action::RollBack => {
            let kind = form.get("kind");
            post("/v1/policies/rollback".into(), json!({ "kind": kind })).await?;
            back_to("/console/policies")
        }
    })
}
