use clap::Parser;
use control_plane::config::ServerConfig;
use control_plane::startup::Application;
use control_plane::telemetry;

// glibc malloc dominated request profiles (JSON trees, small strings); mimalloc halves that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in the bundled mimalloc 2.x (`mimalloc.h`, `mi_option_e`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Return freed pages at once instead of after 10 ms of later allocator activity: threads
    // that go idle (a thousand quiet audit streams) would otherwise hold them indefinitely.
    // SAFETY: sets a process-wide allocator option; no memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    let config = ServerConfig::parse();
    // Log lines are written by a background thread, never on a request's thread; the guard
    // flushes what is queued at exit. Not lossy: a full queue waits rather than drops lines.
    let (writer, _flush_on_exit) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .finish(std::io::stdout());
    telemetry::init(config.log_format, "info,sqlx=warn", writer);
    let app = match Application::build(&config).await {
        Ok(app) => app,
        Err(e) => {
            // One clear line for the operator, not a backtrace.
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
            std::process::exit(1);
        }
    };
    app.run_until_stopped().await?;
    Ok(())
}
