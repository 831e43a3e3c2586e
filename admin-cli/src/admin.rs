//! The admin verbs over HTTP: organisations, workspaces, environments, users and tokens. Each
//! parses its arguments, makes one admin API call (a list follows the cursor to its end) and
//! prints the answer; the rules, the role checks and the audit events are the server's. In
//! JSON a verb prints the object inside the API's envelope, so a script reads `.id` or
//! `.token` as it did when cpctl opened the store.

use serde_json::{Value, json};
use uuid::Uuid;

use crate::cli::{
    Command, EnvironmentsCommand, IssueArgs, OrgsCommand, OutputFormat, TokensCommand,
    UsersCommand, WorkspacesCommand,
};
use crate::output::{self, Cell, Column};
use crate::remote::Client;

const ORGANISATION: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("NAME", "name", Cell::Text),
    ("CREATED", "createdAt", Cell::Text),
];
const WORKSPACE: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("ORGANISATION", "organisationId", Cell::Text),
    ("NAME", "name", Cell::Text),
    ("CREATED", "createdAt", Cell::Text),
];
const ENVIRONMENT: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("WORKSPACE", "workspaceId", Cell::Text),
    ("NAME", "name", Cell::Text),
    ("CREATED", "createdAt", Cell::Text),
];
const USER: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("ORGANISATION", "organisationId", Cell::Text),
    ("EMAIL", "email", Cell::Text),
    ("ROLE", "role", Cell::Text),
    ("CREATED", "createdAt", Cell::Text),
    ("DISABLED", "disabledAt", Cell::Text),
];
const TOKEN: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("PREFIX", "prefix", Cell::Text),
    ("NAME", "name", Cell::Text),
    ("USER", "userId", Cell::Text),
    ("WORKSPACES", "workspaceIds", Cell::Count),
    ("EXPIRES", "expiresAt", Cell::Text),
    ("REVOKED", "revokedAt", Cell::Text),
    ("ISSUED BY", "issuedByTokenId", Cell::Text),
    ("LAST USED", "lastUsedAt", Cell::Never),
    ("FROM", "lastUsedFrom", Cell::Text),
];

/// A verb answered over HTTP.
pub enum AdminVerb {
    Orgs(OrgsCommand),
    Workspaces(WorkspacesCommand),
    Environments(EnvironmentsCommand),
    Users(UsersCommand),
    Tokens(TokensCommand),
    Audit(crate::audit::AuditCommand),
    Deliveries(crate::deliveries::DeliveriesCommand),
    Pools(crate::pools::PoolsCommand),
    Runners(crate::runners::RunnersCommand),
    Workflows(crate::workflows::WorkflowsCommand),
    Plugins(crate::marketplace::PluginsCommand),
    Reviews(crate::marketplace::ReviewsCommand),
    Policies(crate::cli::PoliciesCommand),
    Webhooks(crate::cli::WebhooksCommand),
}

impl AdminVerb {
    /// The verb, when `command` is one; the command back otherwise (a store or local verb).
    pub fn of(command: Command) -> Result<Self, Box<Command>> {
        Ok(match command {
            Command::Orgs(c) => Self::Orgs(c),
            Command::Workspaces(c) => Self::Workspaces(c),
            Command::Environments(c) => Self::Environments(c),
            Command::Users(c) => Self::Users(c),
            Command::Tokens(c) => Self::Tokens(c),
            // `verify --export` stays local: an export file and public keys.
            Command::Audit(c) if !c.is_offline() => Self::Audit(c),
            Command::Deliveries(c) => Self::Deliveries(c),
            Command::Pools(c) => Self::Pools(c),
            // `sign` and `serve` stay local: the runner's key, no server call.
            Command::Runners(c) if !c.is_local() => Self::Runners(c),
            Command::Workflows(c) => Self::Workflows(c),
            Command::Plugins(c) => Self::Plugins(c),
            Command::Reviews(c) => Self::Reviews(c),
            // `test`, `bench` and `new` stay local: files and an engine of cpctl's own.
            Command::Policies(c) if !c.is_local() => Self::Policies(c),
            Command::Webhooks(c) => Self::Webhooks(c),
            other => return Err(Box::new(other)),
        })
    }

    pub async fn run(self, client: &Client, out: OutputFormat) -> anyhow::Result<()> {
        match self {
            Self::Orgs(c) => orgs(client, out, c).await,
            Self::Workspaces(c) => workspaces(client, out, c).await,
            Self::Environments(c) => environments(client, out, c).await,
            Self::Users(c) => users(client, out, c).await,
            Self::Tokens(c) => tokens(client, out, c).await,
            Self::Audit(c) => crate::audit::run(client, out, c).await,
            Self::Deliveries(c) => crate::deliveries::run(client, out, c).await,
            Self::Pools(c) => crate::pools::run(client, out, c).await,
            Self::Runners(c) => crate::runners::run(client, out, c).await,
            Self::Workflows(c) => crate::workflows::run(client, out, c).await,
            Self::Plugins(c) => crate::marketplace::plugins(client, out, c).await,
            Self::Reviews(c) => crate::marketplace::reviews(client, out, c).await,
            Self::Policies(c) => crate::policies::run(client, out, c).await,
            Self::Webhooks(c) => crate::policies::webhooks(client, out, c).await,
        }
    }
}

fn organisation_path(org: &str) -> String {
    format!("/v1/organisations/{org}")
}

async fn orgs(client: &Client, out: OutputFormat, command: OrgsCommand) -> anyhow::Result<()> {
    match command {
        OrgsCommand::Create { name } => {
            let body = client
                .post("/v1/organisations", json!({ "name": name }))
                .await?;
            output::created_value(out, &body["organisation"]);
        }
        OrgsCommand::List => {
            let all = client.get_all("/v1/organisations", &[]).await?;
            output::rows(out, ORGANISATION, &all);
        }
        OrgsCommand::SelfApproval { org, rule } => {
            let allowed = rule == crate::cli::SelfApprovalRule::Allow;
            let path = format!(
                "{}/self-approval",
                organisation_path(&client.organisation(org).await?)
            );
            let body = client
                .change(reqwest::Method::PUT, &path, json!({ "allowed": allowed }))
                .await?;
            match out {
                OutputFormat::Json => println!("{body}"),
                OutputFormat::Table => println!(
                    "self-approval {} in organisation {}",
                    if allowed { "allowed" } else { "refused" },
                    body["organisationId"].as_str().unwrap_or("-")
                ),
            }
        }
    }
    Ok(())
}

async fn workspaces(
    client: &Client,
    out: OutputFormat,
    command: WorkspacesCommand,
) -> anyhow::Result<()> {
    match command {
        WorkspacesCommand::Create { org, name } => {
            let path = format!(
                "{}/workspaces",
                organisation_path(&client.organisation(org).await?)
            );
            let body = client.post(&path, json!({ "name": name })).await?;
            output::created_value(out, &body["workspace"]);
        }
        WorkspacesCommand::List { org } => {
            let path = format!(
                "{}/workspaces",
                organisation_path(&client.organisation(org).await?)
            );
            output::rows(out, WORKSPACE, &client.get_all(&path, &[]).await?);
        }
    }
    Ok(())
}

async fn environments(
    client: &Client,
    out: OutputFormat,
    command: EnvironmentsCommand,
) -> anyhow::Result<()> {
    let (org, workspace) = match &command {
        EnvironmentsCommand::Create { org, workspace, .. }
        | EnvironmentsCommand::List { org, workspace } => (*org, *workspace),
    };
    let path = format!(
        "{}/workspaces/{workspace}/environments",
        organisation_path(&client.organisation(org).await?)
    );
    match command {
        EnvironmentsCommand::Create { name, .. } => {
            let body = client.post(&path, json!({ "name": name })).await?;
            output::created_value(out, &body["environment"]);
        }
        EnvironmentsCommand::List { .. } => {
            output::rows(out, ENVIRONMENT, &client.get_all(&path, &[]).await?)
        }
    }
    Ok(())
}

async fn users(client: &Client, out: OutputFormat, command: UsersCommand) -> anyhow::Result<()> {
    let org = match &command {
        UsersCommand::Create { org, .. }
        | UsersCommand::List { org }
        | UsersCommand::Disable { org, .. }
        | UsersCommand::Enable { org, .. }
        | UsersCommand::SetRole { org, .. }
        | UsersCommand::Show { org, .. } => *org,
    };
    let users = format!(
        "{}/users",
        organisation_path(&client.organisation(org).await?)
    );
    match command {
        UsersCommand::Create { email, role, .. } => {
            let body = client
                .post(&users, json!({ "email": email, "role": role.as_str() }))
                .await?;
            output::created_value(out, &body["user"]);
        }
        UsersCommand::List { .. } => output::rows(out, USER, &client.get_all(&users, &[]).await?),
        UsersCommand::Disable { user, reason, .. } => {
            let body = match reason {
                Some(reason) => json!({ "reason": reason.as_str() }),
                None => json!({}),
            };
            let body = client
                .post(&format!("{users}/{user}/disable"), body)
                .await?;
            changed(out, body, "disabled");
        }
        UsersCommand::Enable { user, .. } => {
            let body = client
                .post(&format!("{users}/{user}/enable"), json!({}))
                .await?;
            changed(out, body, "enabled");
        }
        UsersCommand::SetRole { user, role, .. } => {
            let path = format!("{users}/{user}/role");
            let body = client
                .change(
                    reqwest::Method::PUT,
                    &path,
                    json!({ "role": role.as_str() }),
                )
                .await?;
            changed(out, body, &format!("set to {role}"));
        }
        UsersCommand::Show { user, .. } => {
            let body = client.get(&format!("{users}/{user}")).await?;
            show_user(out, &body);
        }
    }
    Ok(())
}

/// A user changed (or already so): the user with `changed` in JSON, a sentence in a table.
fn changed(out: OutputFormat, body: Value, verb: &str) {
    let mut user = body["user"].clone();
    let id = user["id"].as_str().unwrap_or("-").to_owned();
    let was_changed = body["changed"].as_bool().unwrap_or(false);
    match out {
        OutputFormat::Json => {
            user["changed"] = json!(was_changed);
            println!("{user}");
        }
        OutputFormat::Table if was_changed => println!("user {id} {verb}"),
        OutputFormat::Table => println!("user {id} was already {verb}"),
    }
}

fn show_user(out: OutputFormat, body: &Value) {
    let tokens = body["tokens"].as_array().cloned().unwrap_or_default();
    match out {
        OutputFormat::Json => println!("{body}"),
        OutputFormat::Table => {
            let u = &body["user"];
            let text = |key: &str| u[key].as_str().unwrap_or("-").to_owned();
            println!("id:           {}", text("id"));
            println!("organisation: {}", text("organisationId"));
            println!("email:        {}", text("email"));
            println!("role:         {}", text("role"));
            println!("created:      {}", text("createdAt"));
            match u["disabledAt"].as_str() {
                None => println!("disabled:     no"),
                Some(at) => {
                    println!("disabled:     since {at}");
                    println!("reason:       {}", text("disabledReason"));
                }
            }
            println!();
            output::rows(out, TOKEN, &tokens);
        }
    }
}

async fn tokens(client: &Client, out: OutputFormat, command: TokensCommand) -> anyhow::Result<()> {
    let org = match &command {
        TokensCommand::Issue(IssueArgs { org, .. })
        | TokensCommand::List { org, .. }
        | TokensCommand::Show { org, .. }
        | TokensCommand::Revoke { org, .. }
        | TokensCommand::Rotate { org, .. } => *org,
    };
    let base = organisation_path(&client.organisation(org).await?);
    match command {
        TokensCommand::Issue(args) => {
            let body = json!({
                "name": args.name,
                "scopes": args.scopes,
                "workspaceIds": args.workspaces,
                "environmentIds": args.environments,
                "expiresInDays": args.expires_in_days,
            });
            let path = format!("{base}/users/{}/tokens", args.user);
            let issued = client.post(&path, body).await?;
            output::credential_value(out, &issued["credential"]);
        }
        TokensCommand::List {
            user,
            workspace,
            expiring_within,
            unused_for,
            ..
        } => {
            let mut query = Vec::new();
            let mut add = |name, value: Option<String>| {
                if let Some(value) = value {
                    query.push((name, value));
                }
            };
            add("userId", user.map(|u| u.to_string()));
            add("workspaceId", workspace.map(|w| w.to_string()));
            add(
                "expiringWithinSeconds",
                expiring_within.map(|s| s.seconds().to_string()),
            );
            add(
                "unusedForSeconds",
                unused_for.map(|s| s.seconds().to_string()),
            );
            let all = client.get_all(&format!("{base}/tokens"), &query).await?;
            output::rows(out, TOKEN, &all);
        }
        TokensCommand::Show { id, .. } => {
            let body = client.get(&format!("{base}/tokens/{id}")).await?;
            let token = &body["token"];
            match out {
                OutputFormat::Json => println!("{token}"),
                OutputFormat::Table => {
                    output::rows(out, TOKEN, std::slice::from_ref(token));
                    if let Some(agent) = token["lastUsedUserAgent"].as_str() {
                        println!("last user agent: {agent}");
                    }
                }
            }
        }
        TokensCommand::Revoke {
            token,
            workspace,
            reason,
            cascade,
            ..
        } => revoke(client, out, &base, token, workspace, reason, cascade).await?,
        TokensCommand::Rotate { token, grace, .. } => {
            let path = format!("{base}/tokens/{token}/rotate");
            let seconds = grace.map_or(0, |g| g.seconds());
            let body = client
                .post(&path, json!({ "graceSeconds": seconds }))
                .await?;
            let until = body["previousValidUntil"]
                .as_str()
                .unwrap_or("-")
                .to_owned();
            match out {
                OutputFormat::Json => {
                    let mut credential = body["credential"].clone();
                    credential["previousValidUntil"] = json!(until);
                    println!("{credential}");
                }
                OutputFormat::Table => {
                    output::credential_value(out, &body["credential"]);
                    match grace.filter(|g| !g.is_zero()) {
                        None => println!("previous: stopped working at {until}"),
                        Some(g) => println!("previous: works until {until} ({g} grace)"),
                    }
                }
            }
        }
    }
    Ok(())
}

async fn revoke(
    client: &Client,
    out: OutputFormat,
    base: &str,
    token: Uuid,
    workspace: Option<Uuid>,
    reason: String,
    cascade: bool,
) -> anyhow::Result<()> {
    let mut body = json!({ "reason": reason, "cascade": cascade });
    if let Some(workspace) = workspace {
        body["workspaceId"] = json!(workspace);
    }
    let outcome = client
        .post(&format!("{base}/tokens/{token}/revoke"), body)
        .await?;
    match out {
        OutputFormat::Json => println!("{outcome}"),
        OutputFormat::Table if cascade => println!(
            "revoked, with {} tokens it issued",
            outcome["descendantsRevoked"].as_u64().unwrap_or(0)
        ),
        OutputFormat::Table if outcome["tokenRevoked"].as_bool() == Some(true) => {
            println!("revoked (the token had no other workspace and is revoked entirely)")
        }
        OutputFormat::Table => println!("revoked"),
    }
    Ok(())
}
