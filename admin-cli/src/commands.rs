//! Each command parses its arguments into domain types and calls one service method.

use anyhow::Context;
use clap::CommandFactory;
use serde_json::json;

use control_plane::config::ServerConfig;
use control_plane::domain::{CorrelationId, ExpiresInDays};
use control_plane::service::{BootstrapInput, Services};
use control_plane::startup::{base_url, first_steps, open_services};
use control_plane::storage::RecordsLocation;

use crate::admin::AdminVerb;
use crate::cli::PoliciesCommand;
use crate::cli::{Cli, Command, OrgsCommand, OutputFormat, WebhooksCommand};
use crate::output;
use control_plane::policy::PolicyKind;

fn config_of(cli: &Cli) -> ServerConfig {
    let mut config = ServerConfig::for_database(cli.database_url.clone().unwrap_or_default());
    config.database_url = cli.database_url.clone();
    config.data_dir = cli.data_dir.clone();
    config.token_hash_key = cli.token_hash_key.clone();
    config.webhook_signing_keys = cli.webhook_signing_keys.clone();
    config.key_encryption_key = cli.key_encryption_key.clone();
    config.key_encryption_key_file = cli.key_encryption_key_file.clone();
    config.delivery_http_hosts = cli.delivery_http_hosts.clone();
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
        Command::Orgs(OrgsCommand::Create { .. } | OrgsCommand::List)
        | Command::Workspaces(_)
        | Command::Environments(_)
        | Command::Users(_)
        | Command::Tokens(_) => {}
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
        Command::Orgs(OrgsCommand::SelfApproval { org, rule }) => {
            let allowed = rule == crate::cli::SelfApprovalRule::Allow;
            services.set_self_approval(org, allowed, &cid).await?;
            match out {
                OutputFormat::Json => {
                    println!(
                        "{}",
                        json!({ "organisationId": org, "selfApproval": allowed })
                    )
                }
                OutputFormat::Table => println!(
                    "self-approval {} in organisation {org}",
                    if allowed { "allowed" } else { "refused" }
                ),
            }
        }
        Command::Policies(command) => policies(&services, out, command).await?,
        Command::Webhooks(WebhooksCommand::Keys) => webhook_keys(&services, out),
        Command::Pools(command) => crate::pools::pools(&services, out, &cid, command).await?,
        Command::Audit(command) => crate::audit::audit(&services, out, &cid, command).await?,
        Command::Runners(command) => crate::runners::runners(&services, out, &cid, command).await?,
        Command::Deliveries(command) => {
            crate::deliveries::deliveries(&services, out, &cid, command).await?
        }
        Command::Workflows(command) => {
            crate::workflows::workflows(&services, out, &cid, command).await?
        }
        Command::Plugins(command) => {
            crate::marketplace::plugins(&services, out, &cid, command).await?
        }
        Command::Reviews(command) => {
            crate::marketplace::reviews(&services, out, &cid, command).await?
        }
    }
    Ok(())
}

/// `cpctl webhooks keys`: the public keys webhooks to runners are signed with, current first.
fn webhook_keys(services: &Services, out: OutputFormat) {
    let keys = services.webhook_signer().public_keys();
    match out {
        OutputFormat::Json => println!(
            "{}",
            serde_json::Value::Array(
                keys.iter()
                    .map(|k| json!({ "kid": k.kid, "current": k.current, "publicKey": k.whpk(), "x": k.x() }))
                    .collect()
            )
        ),
        OutputFormat::Table => {
            println!("{:<12}  {:<8}  {:<49}  X (JWK)", "KID", "CURRENT", "PUBLIC KEY");
            for k in &keys {
                let current = if k.current { "yes" } else { "" };
                println!("{:<12}  {current:<8}  {:<49}  {}", k.kid, k.whpk(), k.x());
            }
        }
    }
}

fn kind(raw: &str) -> anyhow::Result<PolicyKind> {
    PolicyKind::parse(raw).map_err(anyhow::Error::msg)
}

async fn policies(
    services: &Services,
    out: OutputFormat,
    command: PoliciesCommand,
) -> anyhow::Result<()> {
    match command {
        PoliciesCommand::Install {
            file,
            kind: k,
            name,
            memory,
            cases,
        } => {
            crate::policy_budgets::install(
                services,
                out,
                &file,
                &k,
                &name,
                memory,
                cases.as_deref(),
            )
            .await?
        }
        PoliciesCommand::List => {
            let (all, state) = services.list_policies().await?;
            match out {
                OutputFormat::Json => println!(
                    "{}",
                    json!({
                        "policies": all.iter().map(output::Render::json).collect::<Vec<_>>(),
                        "active": {
                            "authorizer": state.authorizer.map(|p| format!("{}@{}", p.name, p.version)).unwrap_or_else(|| "built-in".into()),
                            "moderator": state.moderator.map(|p| format!("{}@{}", p.name, p.version)).unwrap_or_else(|| "built-in".into()),
                        },
                        "shadow": state.shadow.map(|p| format!("{}@{}", p.name, p.version)),
                    })
                ),
                OutputFormat::Table => {
                    output::list(out, &all);
                    let active = |p: Option<control_plane::storage::PolicyRecord>| {
                        p.map(|p| format!("{}@{}", p.name, p.version))
                            .unwrap_or_else(|| "built-in default".into())
                    };
                    println!("\nactive authorizer: {}", active(state.authorizer));
                    println!("active moderator:  {}", active(state.moderator));
                    if let Some(shadow) = state.shadow {
                        println!("shadow authorizer: {}@{}", shadow.name, shadow.version);
                    }
                }
            }
        }
        PoliciesCommand::Show { policy } => {
            let policy = services.find_policy(&policy).await?;
            match out {
                OutputFormat::Json => println!("{}", output::Render::json(&policy)),
                OutputFormat::Table => output::list(out, &[policy]),
            }
        }
        PoliciesCommand::Activate { policy, force } => {
            crate::policy_budgets::activate(services, out, &policy, force).await?
        }
        PoliciesCommand::Rollback { kind: k } => {
            let k = kind(&k)?;
            let now = services.rollback_policy(k).await?;
            let name = now
                .map(|p| format!("{}@{}", p.name, p.version))
                .unwrap_or_else(|| "built-in".into());
            match out {
                OutputFormat::Json => println!("{}", json!({ "kind": k.as_str(), "active": name })),
                OutputFormat::Table => println!("the active {} is now {name}", k.as_str()),
            }
        }
        PoliciesCommand::Remove { policy } => {
            let policy = services.remove_policy(&policy).await?;
            match out {
                OutputFormat::Json => println!(
                    "{}",
                    json!({ "removed": format!("{}@{}", policy.name, policy.version) })
                ),
                OutputFormat::Table => println!("removed {}@{}", policy.name, policy.version),
            }
        }
        PoliciesCommand::Shadow { policy, off } => {
            let reference = if off {
                None
            } else {
                Some(policy.context("give NAME@VERSION, or --off")?)
            };
            let shadow = services.shadow_policy(reference.as_deref()).await?;
            match (out, shadow) {
                (OutputFormat::Json, s) => println!(
                    "{}",
                    json!({ "shadow": s.map(|p| format!("{}@{}", p.name, p.version)) })
                ),
                (OutputFormat::Table, Some(p)) => println!(
                    "{}@{} now runs in shadow beside the active authorizer",
                    p.name, p.version
                ),
                (OutputFormat::Table, None) => println!("shadow evaluation stopped"),
            }
        }
        PoliciesCommand::ShadowReport { limit } => {
            output::list(out, &services.shadow_report(limit).await?)
        }
        PoliciesCommand::Decisions(args) => {
            crate::policy_decisions::list(services, out, args).await?
        }
        PoliciesCommand::Test { .. }
        | PoliciesCommand::Bench { .. }
        | PoliciesCommand::New { .. } => {}
    }
    Ok(())
}
