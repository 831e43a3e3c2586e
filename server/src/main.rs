use clap::Parser;
use control_plane::config::ServerConfig;
use control_plane::startup::Application;
use control_plane::telemetry;

// glibc malloc dominated request profiles (JSON trees, small strings); mimalloc halves that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = ServerConfig::parse();
    // Log lines are written by a background thread, never on a request's thread; the guard
    // flushes what is queued at exit. Not lossy: a full queue waits rather than drops lines.
    let (writer, _flush_on_exit) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .finish(std::io::stdout());
    telemetry::init(config.log_format, "info,sqlx=warn", writer);
    let app = Application::build(&config).await?;
    app.run_until_stopped().await?;
    Ok(())
}
