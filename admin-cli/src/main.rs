//! `cpctl`: the admin CLI. Commands are thin adapters over the service layer.

mod audit;
mod cli;
mod commands;
mod deliveries;
mod fleet;
mod marketplace;
mod output;
mod pools;
mod runners;
mod store;
mod tokens;
mod users;
mod workflows;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        // A value that does not parse (a malformed id, `--grace 5x`) is one line, as every other
        // error of cpctl; help, usage and the rest keep clap's own rendering.
        Err(e) if e.kind() == clap::error::ErrorKind::ValueValidation => {
            let rendered = e.render().to_string();
            eprintln!("{}", rendered.lines().next().unwrap_or_default());
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
