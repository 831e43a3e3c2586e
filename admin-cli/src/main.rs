//! `cpctl`: the admin CLI. The admin verbs are clients of the server's HTTP API (`admin`,
//! `remote`); the store verbs and those not on HTTP yet are thin adapters over the service layer.

mod admin;
mod audit;
mod cli;
mod commands;
mod deliveries;
mod fleet;
mod marketplace;
mod output;
mod policies;
mod policy_budgets;
mod policy_decisions;
mod policy_new;
mod pools;
mod remote;
mod runners;
mod store;
mod workflows;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        // Bad input (a malformed id, `--grace 5x`, `--state lost`, a missing argument) is one
        // line, as every other error of cpctl; help and version keep clap's own rendering.
        Err(e)
            if e.use_stderr()
                && e.kind() != clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            // The message is what comes before clap's first blank line, and its tips ("a similar
            // argument exists"); the usage lines are left out.
            let rendered = e.render().to_string();
            let mut lines = rendered.lines().map(str::trim);
            let mut message: Vec<&str> = lines.by_ref().take_while(|l| !l.is_empty()).collect();
            message.extend(lines.filter(|l| l.starts_with("tip:")));
            eprintln!("{}", message.join(" "));
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    // The example runner logs one line per delivery; every other command only warnings.
    let serving = matches!(
        cli.command,
        cli::Command::Runners(runners::RunnersCommand::Serve { .. })
    );
    control_plane::telemetry::init(
        control_plane::config::LogFormat::Pretty,
        if serving {
            "info,sqlx=error"
        } else {
            "warn,sqlx=error"
        },
        std::io::stderr,
    );
    match commands::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<policy_new::BadInput>().is_some() => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            // A conflict leads with its code, as the API's 409 body would (`invalid_transition`).
            let code = match e.downcast_ref::<control_plane::service::ServiceError>() {
                Some(control_plane::service::ServiceError::Conflict { code, .. }) => {
                    format!("{code}: ")
                }
                _ => String::new(),
            };
            // One line, whatever the cause chain.
            eprintln!("error: {code}{}", format!("{e:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}
