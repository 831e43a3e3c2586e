//! Server configuration: flags with environment fallbacks (`control-plane --help`).

use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log pipelines.
    Json,
    /// Human-readable lines.
    Pretty,
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "control-plane",
    version,
    about = "The control plane HTTP server"
)]
pub struct ServerConfig {
    /// Address to listen on.
    #[arg(long, env = "CP_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,

    /// Postgres URL of the records store, e.g. postgres://postgres@127.0.0.1:5432/control_plane.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Base64 key (at least 32 bytes) for hashing token secrets. When absent, a key is generated
    /// on first start and kept in the records store; production should set it explicitly.
    #[arg(long, env = "CP_TOKEN_HASH_KEY", hide_env_values = true)]
    pub token_hash_key: Option<String>,

    /// Log format.
    #[arg(long, env = "CP_LOG_FORMAT", value_enum, default_value = "pretty")]
    pub log_format: LogFormat,

    /// Largest accepted request body in bytes; larger bodies get 413.
    #[arg(long, env = "CP_BODY_LIMIT", default_value_t = 1024 * 1024)]
    pub body_limit: usize,

    /// Most active tokens one user may hold.
    #[arg(long, env = "CP_MAX_ACTIVE_TOKENS_PER_USER", default_value_t = 500)]
    pub max_active_tokens_per_user: u32,

    /// Size of the Postgres connection pool.
    #[arg(long, env = "CP_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
}

impl ServerConfig {
    /// Defaults for a given database, as tests and embedding programs need.
    pub fn for_database(database_url: impl Into<String>) -> Self {
        let mut config = Self::parse_from(["control-plane"]);
        config.database_url = Some(database_url.into());
        config.listen = "127.0.0.1:0".into();
        config.token_hash_key = None;
        config
    }
}
