//! Each command parses its arguments into domain types and calls one service method.

use clap::CommandFactory;
use serde_json::json;

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, ExpiresInDays};
use control_plane::service::{BootstrapInput, Services};
use control_plane::startup::{base_url, first_steps, open_services};
use control_plane::storage::RecordsLocation;

use crate::admin::AdminVerb;
use crate::cli::{Cli, Command, OutputFormat, PoliciesCommand};
use crate::output;

fn config_of(cli: &Cli) -> ServerConfig {
    let mut config = ServerConfig::for_database(cli.database_url.clone().unwrap_or_default());
    config.database_url = cli.database_url.clone();
    config.data_dir = cli.data_dir.clone();
    config.token_hash_key = cli.token_hash_key.clone();
    config.webhook_signing_keys = cli.webhook_signing_keys.clone();
    config.key_encryption_key = cli.key_encryption_key.clone();
    config.key_encryption_key_file = cli.key_encryption_key_file.clone();
    config.db_max_connections = 2;
    config
}

async fn services(cli: &Cli) -> anyhow::Result<std::sync::Arc<Services>> {
    open_services(&config_of(cli)).await
}

/// Only `migrate` and `bootstrap` make the embedded store in the data directory: any other verb
/// run from the wrong folder would make an empty one with fresh keys and answer "no such
/// organisation". A store named by `DATABASE_URL` is the caller's explicit choice and opens as
/// before (a Postgres database cannot be told apart from a new one without migrating it).
fn refuse_to_create_a_store(cli: &Cli) -> anyhow::Result<()> {
    if cli.database_url.is_some() {
        return Ok(());
    }
    match config_of(cli).records() {
        RecordsLocation::Sqlite(path) if !path.exists() => anyhow::bail!(
            "no records store at {}: pass --data-dir (or CP_DATA_DIR) or DATABASE_URL for an \
             existing one; `cpctl bootstrap` or `cpctl migrate` creates one",
            path.display()
        ),
        _ => Ok(()),
    }
}

fn arg<T>(what: &str, parsed: Result<T, String>) -> anyhow::Result<T> {
    parsed.map_err(|reason| anyhow::anyhow!("{what} {reason}"))
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    // The HTTP client's verbs: no records store, no server setting.
    match &cli.command {
        Command::Login { server, name } => {
            return crate::remote::login(cli.output, server, name.clone()).await;
        }
        Command::Whoami => return crate::remote::whoami(cli.output, cli.context.as_deref()).await,
        Command::Context(command) => return crate::remote::context(cli.output, command.clone()),
        _ => {}
    }
    let mut cli = cli;
    cli.command = match AdminVerb::of(cli.command) {
        Ok(verb) => {
            let target = crate::remote::target(cli.context.as_deref())?;
            return verb
                .run(&crate::remote::Client::new(target)?, cli.output)
                .await;
        }
        Err(command) => *command,
    };
    if let Command::Completion { shell } = &cli.command {
        clap_complete::generate(*shell, &mut Cli::command(), "cpctl", &mut std::io::stdout());
        return Ok(());
    }
    if let Command::Policies(PoliciesCommand::Test {
        file,
        cases,
        kind,
        require_coverage,
    }) = &cli.command
    {
        // Needs no records store: the component and the cases are files.
        return crate::policy_budgets::test(cli.output, file, cases, kind, *require_coverage).await;
    }
    if let Command::Policies(PoliciesCommand::Bench {
        file,
        kind,
        cases,
        memory,
    }) = &cli.command
    {
        return crate::policy_budgets::bench(cli.output, file, kind, cases.as_deref(), *memory)
            .await;
    }
    if let Command::Policies(PoliciesCommand::New {
        name,
        kind,
        lang,
        dir,
    }) = &cli.command
    {
        // Writes files only.
        return crate::policy_new::run(cli.output, name, *kind, *lang, dir.as_deref());
    }
    if let Command::Runners(command @ crate::runners::RunnersCommand::Sign { .. }) = &cli.command {
        // Needs no records store: only the runner's key.
        return crate::runners::sign(cli.output, command);
    }
    if let Command::Runners(command @ crate::runners::RunnersCommand::Serve { .. }) = cli.command {
        // Needs no records store: the runner's key and the control plane's URL.
        return crate::runners::serve(command).await;
    }
    if let Command::Audit(
        command @ crate::audit::AuditCommand::Verify {
            export: Some(_), ..
        },
    ) = cli.command
    {
        // Offline: the export and the public keys, no store.
        return crate::audit::verify_offline(cli.output, command).await;
    }
    if let Command::Store(command) = cli.command {
        // Names its own stores; opening the services would write a hashing key into one.
        return crate::store::run(cli.output, command).await;
    }
    if !matches!(cli.command, Command::Migrate | Command::Bootstrap { .. }) {
        refuse_to_create_a_store(&cli)?;
    }
    let services = services(&cli).await?;
    // Every admin action is audited under one correlation id per invocation.
    let cid = CorrelationId::generate();
    let out = cli.output;
    match cli.command {
        // Answered before any store was opened (above).
        Command::Completion { .. }
        | Command::Store(_)
        | Command::Login { .. }
        | Command::Context(_)
        | Command::Whoami => {}
        // Answered over HTTP (above).
        Command::Orgs(_)
        | Command::Pools(_)
        | Command::Runners(_)
        | Command::Deliveries(_)
        | Command::Workflows(_)
        | Command::Plugins(_)
        | Command::Reviews(_)
        | Command::Workspaces(_)
        | Command::Environments(_)
        | Command::Users(_)
        | Command::Tokens(_)
        | Command::Audit(_)
        | Command::Webhooks(_) => {}
        // `test`, `bench` and `new` were answered locally (above); the rest over HTTP.
        Command::Policies(_) => {}
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
            listen,
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
                    // On stdout only (it holds the token); JSON output stays one document.
                    println!("\n{}", first_steps(&base_url(&listen, None), &done, None));
                }
            }
        }
        Command::Recover {
            operator,
            expires_in_days,
            listen,
        } => {
            let days = arg("--expires-in-days", ExpiresInDays::parse(expires_in_days))?;
            let (user, credential) = services.recover_operator(&operator, days, &cid).await?;
            output::credential(out, &credential);
            if out == OutputFormat::Table {
                println!(
                    "\noperator {} ({}): keep it with `cpctl login --server {}`",
                    user.id,
                    user.email,
                    base_url(&listen, None)
                );
            }
        }
    }
    Ok(())
}
