//! Each command parses its arguments into domain types and calls one service method.

use anyhow::Context;
use clap::CommandFactory;
use serde_json::json;

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, ExpiresInDays, RevocationReason, Scope, TokenName};
use control_plane::service::{BootstrapInput, IssueTokenInput, Services};
use control_plane::startup::open_services;
use control_plane::storage::TokenFilter;

use crate::cli::{
    Cli, Command, EnvironmentsCommand, OrgsCommand, OutputFormat, TokensCommand, UsersCommand,
    WorkspacesCommand,
};
use crate::output;

async fn services(cli: &Cli) -> anyhow::Result<std::sync::Arc<Services>> {
    let url = cli
        .database_url
        .clone()
        .context("DATABASE_URL (or --database-url) is required")?;
    let mut config = ServerConfig::for_database(url);
    config.token_hash_key = cli.token_hash_key.clone();
    config.db_max_connections = 2;
    open_services(&config).await
}

fn arg<T>(what: &str, parsed: Result<T, String>) -> anyhow::Result<T> {
    parsed.map_err(|reason| anyhow::anyhow!("{what} {reason}"))
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    if let Command::Completion { shell } = &cli.command {
        clap_complete::generate(*shell, &mut Cli::command(), "cpctl", &mut std::io::stdout());
        return Ok(());
    }
    let services = services(&cli).await?;
    // Every admin action is audited under one correlation id per invocation.
    let cid = CorrelationId::generate();
    let out = cli.output;
    match cli.command {
        Command::Completion { .. } => {}
        Command::Migrate => {
            // Opening the services applied any pending migration.
            match out {
                OutputFormat::Json => println!("{}", json!({ "migrated": true })),
                OutputFormat::Table => println!("migrations applied"),
            }
        }
        Command::Bootstrap {
            org,
            workspace,
            admin,
            expires_in_days,
        } => {
            let input = BootstrapInput {
                organisation: org,
                workspace,
                admin_email: admin,
                expires_in_days: arg("--expires-in-days", ExpiresInDays::parse(expires_in_days))?,
            };
            let done = services.bootstrap(input, &cid).await?;
            match out {
                OutputFormat::Json => println!(
                    "{}",
                    json!({
                        "organisationId": done.organisation.id,
                        "workspaceId": done.workspace.id,
                        "userId": done.user.id,
                        "credential": output::credential_json(&done.credential),
                    })
                ),
                OutputFormat::Table => {
                    println!("organisation: {}", done.organisation.id);
                    println!("workspace:    {}", done.workspace.id);
                    println!("user:         {}", done.user.id);
                    output::credential(out, &done.credential);
                }
            }
        }
        Command::Orgs(OrgsCommand::Create { name }) => {
            let org = services.create_organisation(&name, &cid).await?;
            output::created(out, &org, org.id);
        }
        Command::Orgs(OrgsCommand::List) => {
            output::list(out, &services.list_organisations().await?)
        }
        Command::Workspaces(WorkspacesCommand::Create { org, name }) => {
            let ws = services.create_workspace(org, &name, &cid).await?;
            output::created(out, &ws, ws.id);
        }
        Command::Workspaces(WorkspacesCommand::List { org }) => {
            output::list(out, &services.list_workspaces(org).await?)
        }
        Command::Environments(EnvironmentsCommand::Create { workspace, name }) => {
            let env = services.create_environment(workspace, &name, &cid).await?;
            output::created(out, &env, env.id);
        }
        Command::Environments(EnvironmentsCommand::List { workspace }) => {
            output::list(out, &services.list_environments(workspace).await?)
        }
        Command::Users(UsersCommand::Create { org, email }) => {
            let user = services.create_user(org, &email, &cid).await?;
            output::created(out, &user, user.id);
        }
        Command::Users(UsersCommand::List { org }) => {
            output::list(out, &services.list_users(org).await?)
        }
        Command::Tokens(TokensCommand::Issue(args)) => {
            let user = services.get_user(args.user).await?;
            let scopes = args
                .scopes
                .iter()
                .map(|s| Scope::parse(s).map_err(|_| anyhow::anyhow!("unknown scope {s:?}")))
                .collect::<anyhow::Result<_>>()?;
            let input = IssueTokenInput::new(
                arg("--name", TokenName::parse(&args.name))?,
                scopes,
                user.organisation_id,
                args.workspaces,
                args.environments,
                arg(
                    "--expires-in-days",
                    ExpiresInDays::parse(args.expires_in_days),
                )?,
            )?;
            let credential = services.issue_token_for_user(user.id, input, &cid).await?;
            output::credential(out, &credential);
        }
        Command::Tokens(TokensCommand::List { user, workspace }) => {
            let filter = TokenFilter {
                user_id: user,
                workspace_id: workspace,
            };
            output::list(out, &services.list_tokens(&filter).await?)
        }
        Command::Tokens(TokensCommand::Revoke {
            token,
            workspace,
            reason,
        }) => {
            let reason = arg("--reason", RevocationReason::parse(&reason))?;
            let outcome = services
                .revoke_token_access_as_admin(workspace, token, reason, &cid)
                .await?;
            match out {
                OutputFormat::Json => println!(
                    "{}",
                    json!({ "revoked": true, "tokenRevoked": outcome.token_revoked })
                ),
                OutputFormat::Table if outcome.token_revoked => {
                    println!("revoked (the token had no other workspace and is revoked entirely)")
                }
                OutputFormat::Table => println!("revoked"),
            }
        }
    }
    Ok(())
}
