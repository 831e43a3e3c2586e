use clap::Parser;
use control_plane::config::ServerConfig;
use control_plane::startup::Application;
use control_plane::telemetry;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = ServerConfig::parse();
    telemetry::init(config.log_format, "info,sqlx=warn", std::io::stdout);
    let app = Application::build(&config).await?;
    app.run_until_stopped().await?;
    Ok(())
}
