//! Server configuration: flags with environment fallbacks (`control-plane --help`).

use clap::{Parser, ValueEnum};

use crate::storage::Rate;

/// A connection cap, or `None` for `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapOption(pub Option<usize>);

fn parse_cap(raw: &str) -> Result<CapOption, String> {
    if raw.eq_ignore_ascii_case("off") {
        return Ok(CapOption(None));
    }
    match raw.parse::<usize>() {
        Ok(n) if n > 0 => Ok(CapOption(Some(n))),
        _ => Err(format!("expected a positive number or `off`, got `{raw}`")),
    }
}

/// A rate, or `None` for `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateOption(pub Option<Rate>);

fn parse_rate(raw: &str) -> Result<RateOption, String> {
    if raw.eq_ignore_ascii_case("off") {
        Ok(RateOption(None))
    } else {
        Rate::parse(raw).map(|r| RateOption(Some(r)))
    }
}

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

    /// Records store: a Postgres URL (postgres://user@host:5432/db) for several replicas, or
    /// sqlite://PATH. Without it: SQLite at DATA_DIR/control-plane.db (one process only).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// A streaming replica of the DATABASE_URL database (postgres://…): activity pages and
    /// stream replays are read from it while it keeps up; everything else stays on the primary.
    #[arg(long, env = "CP_READ_DATABASE_URL", hide_env_values = true)]
    pub read_database_url: Option<String>,

    /// How far the read replica may lag, in milliseconds, and still serve; past it, reads go to
    /// the primary until it catches up.
    #[arg(long, env = "CP_READ_REPLICA_MAX_LAG_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub read_replica_max_lag_ms: u64,

    /// Where the embedded default keeps its SQLite file, when no DATABASE_URL is given, and,
    /// with Postgres, where the default key-encryption key file is.
    #[arg(long, env = "CP_DATA_DIR", default_value = "./data")]
    pub data_dir: std::path::PathBuf,

    /// Base64 of 32 bytes wrapping every key the server generates before it is stored, so the
    /// records store alone reveals none. Every replica and `cpctl` need the same one. Without
    /// it, the key file (below) is used.
    #[arg(long, env = "CP_KEY_ENCRYPTION_KEY", hide_env_values = true)]
    pub key_encryption_key: Option<String>,

    /// The file holding the key-encryption key (base64), created owner-only with a new key when
    /// missing. Default: `control-plane.kek` beside the SQLite file, or in DATA_DIR with
    /// Postgres.
    #[arg(long, env = "CP_KEY_ENCRYPTION_KEY_FILE")]
    pub key_encryption_key_file: Option<std::path::PathBuf>,

    /// On first start with an empty store, create an organisation `dev`, a workspace `default`
    /// and an admin `admin@localhost`, and print a token with every scope once.
    #[arg(long, env = "CP_DEV")]
    pub dev: bool,

    /// With `--dev`, keep the printed token as cpctl's context `dev` (current unless another
    /// context is), so `cpctl` works at once; `false` leaves cpctl's contexts file alone.
    #[arg(long, env = "CP_DEV_CONTEXT", default_value_t = true, action = clap::ArgAction::Set)]
    pub dev_context: bool,

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

    /// Largest policy component `POST /v1/policies` accepts, in MiB (that route's own body
    /// limit; every other route keeps `--body-limit`); larger uploads get 413.
    #[arg(long, env = "CP_POLICY_UPLOAD_MAX_MIB", default_value_t = 64)]
    pub policy_upload_max_mib: usize,

    /// Most active tokens one user may hold.
    #[arg(long, env = "CP_MAX_ACTIVE_TOKENS_PER_USER", default_value_t = 500)]
    pub max_active_tokens_per_user: u32,

    /// Comma-separated words the moderation policy rejects reviews for (case-insensitive).
    #[arg(
        long,
        env = "CP_MODERATION_BLOCKLIST",
        value_delimiter = ',',
        default_value = ""
    )]
    pub moderation_blocklist: Vec<String>,

    /// Idle milliseconds between audit stream heartbeat comments.
    #[arg(
        long,
        env = "CP_SSE_HEARTBEAT_MS",
        default_value_t = 15_000,
        hide = true
    )]
    pub sse_heartbeat_ms: u64,

    /// Audit streams one token may hold open at once, on this replica; the next is a 429.
    #[arg(long, env = "CP_AUDIT_STREAMS_PER_TOKEN", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub audit_streams_per_token: u32,

    /// Audit streams open at once on one workspace, on this replica; the next is a 429.
    #[arg(long, env = "CP_AUDIT_STREAMS_PER_WORKSPACE", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub audit_streams_per_workspace: u32,

    /// Client connections this process keeps open at once; past it a new connection is closed
    /// at once. Default: the open-file limit less 256 (for the stores, streams and logs).
    #[arg(long, env = "CP_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: Option<u64>,

    /// Client connections one IP address keeps open at once (`off`: no cap). Behind a load
    /// balancer every connection comes from its address: raise this, or turn it off there.
    #[arg(long, env = "CP_MAX_CONNECTIONS_PER_ADDRESS", default_value = "256",
          value_parser = parse_cap)]
    pub max_connections_per_address: CapOption,

    /// Milliseconds a request header may take from its first byte (from the accept, for a
    /// connection's first request); a late header closes the connection.
    #[arg(long, env = "CP_HEADER_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,

    /// Seconds a connection may stay without a byte read or written before it is closed. Keep
    /// it above the audit stream heartbeat (15 s).
    #[arg(long, env = "CP_IDLE_TIMEOUT_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_secs: u64,

    /// Audit streams one organisation holds open at once on this replica, over all of its
    /// tokens and workspaces; the next is a 429.
    #[arg(long, env = "CP_AUDIT_STREAMS_PER_ORGANISATION", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub audit_streams_per_organisation: u32,

    /// Audit streams this process holds open at once; the next is a 503.
    #[arg(long, env = "CP_AUDIT_STREAMS_PER_PROCESS", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub audit_streams_per_process: u32,

    /// Seconds after which an audit stream ends cleanly; the client resumes with Last-Event-ID.
    #[arg(long, env = "CP_AUDIT_STREAM_MAX_AGE_SECS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub audit_stream_max_age_secs: u64,

    /// Events an audit stream reads from the log per query while it replays.
    #[arg(long, env = "CP_AUDIT_STREAM_REPLAY_PAGE", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub audit_stream_replay_page: u32,

    /// Redis URL for idempotency records, rate limits and nonces shared by every replica
    /// (several comma-separated URLs: a Redis Cluster's seed nodes). Without it rate limits live
    /// in this process, which is right for exactly one replica; idempotency records and nonces
    /// live in the SQLite file (embedded) or in this process (Postgres).
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// Seconds between purges of expired idempotency records and nonces from the SQLite file, in
    /// the embedded default (an expired row is ignored at once; the purge reclaims its space).
    #[arg(long, env = "CP_EMBEDDED_PURGE_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub embedded_purge_secs: u64,

    /// Seconds between purges of expired committed idempotency outcomes from the records store
    /// (Postgres or SQLite; an expired outcome is ignored at once, the purge reclaims its space).
    #[arg(long, env = "CP_OUTCOME_PURGE_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub outcome_purge_secs: u64,

    /// Seconds between sweeps that fail runner commands past their `timeoutSeconds`. Every
    /// replica sweeps; each timed-out command is failed once, by one of them.
    #[arg(long, env = "CP_COMMAND_TIMEOUT_SWEEP_SECS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub command_timeout_sweep_secs: u64,

    /// How long before its expiry a live token gets a `token.expiring` audit event, once, in
    /// every workspace it still has access to (so a stream or export consumer can warn its
    /// owner): a length of time such as `7d` or `48h`. `0s` gives no notice.
    #[arg(long, env = "CP_TOKEN_EXPIRY_NOTICE", default_value = "7d")]
    pub token_expiry_notice: crate::domain::Span,

    /// Seconds between passes that give tokens their expiry notice. Every replica runs them;
    /// each token gets its notice once, from one of them.
    #[arg(long, env = "CP_TOKEN_EXPIRY_NOTICE_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub token_expiry_notice_secs: u64,

    /// Hosts (comma-separated names or addresses) that runner delivery URLs may reach over plain
    /// http; every other delivery URL must be https. Empty: https only. Unset: loopback
    /// (`localhost,127.0.0.1,::1`) with `--dev`, https only without.
    #[arg(long, env = "CP_DELIVERY_HTTP_HOSTS")]
    pub delivery_http_hosts: Option<String>,

    /// When a webhook delivery is attempted: `0s` (at submission), then the wait after each
    /// failure, each drawn within ±20 % (jitter). Units ms, s, m, h.
    #[arg(long, env = "CP_DELIVERY_RETRY_SCHEDULE",
          default_value = crate::domain::RetrySchedule::DEFAULT,
          value_parser = crate::domain::RetrySchedule::parse)]
    pub delivery_retry_schedule: crate::domain::RetrySchedule,

    /// Milliseconds a delivery attempt may take to connect (TCP and TLS).
    #[arg(long, env = "CP_DELIVERY_CONNECT_TIMEOUT_MS", default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub delivery_connect_timeout_ms: u64,

    /// Milliseconds a delivery attempt may take in all, up to the runner's answer.
    #[arg(long, env = "CP_DELIVERY_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=300_000))]
    pub delivery_timeout_ms: u64,

    /// Delivery attempts in flight at once in this process; `0`: this replica sends no
    /// deliveries (the others do).
    #[arg(long, env = "CP_DELIVERY_CONCURRENCY", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub delivery_concurrency: u32,

    /// Delivery attempts to one runner pool in flight at once in this process; a cap at or
    /// above `--delivery-concurrency` is none.
    #[arg(long, env = "CP_DELIVERY_PER_POOL", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub delivery_per_pool: u32,

    /// Delivery attempts to one organisation's runners in flight at once in this process; a
    /// cap at or above `--delivery-concurrency` is none.
    #[arg(long, env = "CP_DELIVERY_PER_ORGANISATION", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub delivery_per_organisation: u32,

    /// Milliseconds from which a delivery attempt counts as slow for the runner's breaker (one
    /// that timed out always does).
    #[arg(long, env = "CP_DELIVERY_SLOW_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..=300_000))]
    pub delivery_slow_ms: u64,

    /// Slow attempts in a row after which a runner's breaker holds it for the cool-down; `0`:
    /// no breaker.
    #[arg(long, env = "CP_DELIVERY_BREAKER_AFTER", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub delivery_breaker_after: u32,

    /// Milliseconds a runner's breaker holds it; after them, one attempt at a time goes to it
    /// until one is not slow.
    #[arg(long, env = "CP_DELIVERY_BREAKER_COOLDOWN_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub delivery_breaker_cooldown_ms: u64,

    /// Failed delivery attempts in a row after which a runner is disabled (never chosen until
    /// `cpctl runners enable`), once `--runner-disable-failing-secs` have also passed since
    /// the first of them; `0`: never.
    #[arg(long, env = "CP_RUNNER_DISABLE_AFTER_FAILURES", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub runner_disable_after_failures: u32,

    /// Seconds a runner must have been failing (since the first failure in a row) before
    /// `--runner-disable-after-failures` disables it.
    #[arg(long, env = "CP_RUNNER_DISABLE_FAILING_SECS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(0..=604_800))]
    pub runner_disable_failing_secs: u64,

    /// Milliseconds between looks for due deliveries when no change was announced (a
    /// submission on this replica, or on any replica with Postgres, is announced at once).
    #[arg(long, env = "CP_DELIVERY_POLL_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub delivery_poll_ms: u64,

    /// Prefix of every Redis key this server writes.
    #[arg(long, env = "CP_REDIS_PREFIX", default_value = "cp:")]
    pub redis_prefix: String,

    /// Comma-separated base64 keys (32 bytes each) that encrypt stored idempotent responses; the
    /// first encrypts, all decrypt (rotation). When absent, one is generated and kept in the
    /// records store.
    #[arg(long, env = "CP_IDEMPOTENCY_KEYS", hide_env_values = true)]
    pub idempotency_keys: Option<String>,

    /// Comma-separated base64 Ed25519 seeds (32 bytes each) that sign webhooks sent to runners;
    /// the first is current and all sign (rotation: put the new key first, keep the old one
    /// while runners learn the new one, then drop it). When absent, one is generated and kept
    /// in the records store.
    #[arg(long, env = "CP_WEBHOOK_SIGNING_KEYS", hide_env_values = true)]
    pub webhook_signing_keys: Option<String>,

    /// Requests per token (per client address without a valid token): `N/period` such as
    /// `600/m`, or `off`.
    #[arg(long, env = "CP_RATE_LIMIT", default_value = "600/m", value_parser = parse_rate)]
    pub rate_limit: RateOption,

    /// Requests per user, over all of its tokens: `N/period` or `off`.
    #[arg(long, env = "CP_USER_RATE_LIMIT", default_value = "1200/m", value_parser = parse_rate)]
    pub user_rate_limit: RateOption,

    /// Requests per organisation, over all of its users: `N/period` or `off`.
    #[arg(long, env = "CP_ORG_RATE_LIMIT", default_value = "6000/m", value_parser = parse_rate)]
    pub org_rate_limit: RateOption,

    /// Token issuances per user (per client address without a valid token), a separate and
    /// lower budget: `N/period` or `off`.
    #[arg(long, env = "CP_ISSUE_RATE_LIMIT", default_value = "30/m", value_parser = parse_rate)]
    pub issue_rate_limit: RateOption,

    /// Requests per client address to the routes outside /v1 (/healthz, /readyz, /metrics,
    /// /openapi.json, /docs, /.well-known/jwks.json), counted in this process: `N/period` or
    /// `off`.
    #[arg(long, env = "CP_OPS_RATE_LIMIT", default_value = "600/m", value_parser = parse_rate)]
    pub ops_rate_limit: RateOption,

    /// Serve the web console at /console on the API's listener; `false` turns it off (404).
    #[arg(long, env = "CP_CONSOLE", default_value_t = true, action = clap::ArgAction::Set)]
    pub console: bool,

    /// Serve /healthz, /readyz and /metrics on this address instead of the API's (for example a
    /// port only the monitoring network reaches).
    #[arg(long, env = "CP_OPS_LISTEN")]
    pub ops_listen: Option<String>,

    /// Signed runner requests per client address, charged before the signature is checked, in
    /// a bucket of their own: `N/period` or `off`.
    #[arg(
        long,
        env = "CP_RUNNER_ADDRESS_RATE_LIMIT",
        default_value = "6000/m",
        value_parser = parse_rate
    )]
    pub runner_address_rate_limit: RateOption,

    /// Load balancers and proxies whose `X-Forwarded-For` names the client: comma-separated
    /// addresses and CIDR blocks (`10.0.0.0/8,192.0.2.7`), or `none`. The client address is
    /// what rate limits and a token's last use record; only a request whose TCP peer is one of
    /// these is read this way.
    #[arg(long, env = "CP_TRUSTED_PROXIES", default_value = "none",
          value_parser = crate::http::TrustedProxies::parse)]
    pub trusted_proxies: crate::http::TrustedProxies,

    /// Signed runner requests per runner, once the signature verifies: `N/period` or `off`.
    #[arg(long, env = "CP_RUNNER_RATE_LIMIT", default_value = "600/m", value_parser = parse_rate)]
    pub runner_rate_limit: RateOption,

    /// Bytes of stored idempotent responses per user (per runner for signed reports) per 24
    /// hours; over it, a request with an `Idempotency-Key` is refused with 429. `0`: no quota.
    #[arg(long, env = "CP_IDEMPOTENCY_QUOTA_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub idempotency_quota_bytes: u64,

    /// Milliseconds a keyed request's claim holds its key while its handler runs; the handler
    /// is stopped at two thirds of it (503), and the key answers 409 until the lease ends.
    #[arg(long, env = "CP_IDEMPOTENCY_LEASE_MS", default_value_t = 30_000)]
    pub idempotency_lease_ms: u64,

    /// While the limiter (Redis) is down, refuse every request with 503. By default reads and
    /// ordinary writes are served (and counted in a metric) and token issuance is refused.
    #[arg(long, env = "CP_RATE_LIMIT_FAIL_CLOSED")]
    pub rate_limit_fail_closed: bool,

    /// Time budget of one policy decision, in milliseconds.
    #[arg(long, env = "CP_POLICY_DEADLINE_MS", default_value_t = 50)]
    pub policy_deadline_ms: u64,

    /// Memory budget of one policy decision, in MiB.
    #[arg(long, env = "CP_POLICY_MEMORY_MIB", default_value_t = 16)]
    pub policy_memory_mib: usize,

    /// Policy decisions evaluated at once; more wait, up to `--policy-queue-timeout-ms`.
    /// Twice the cores this process may use when absent.
    #[arg(long, env = "CP_POLICY_CONCURRENCY")]
    pub policy_concurrency: Option<usize>,

    /// How long a policy decision waits for a free slot before the request fails with 503
    /// `unavailable`, in milliseconds. Twice the deadline when absent.
    #[arg(long, env = "CP_POLICY_QUEUE_TIMEOUT_MS")]
    pub policy_queue_timeout_ms: Option<u64>,

    /// Shadow authorizer evaluations waiting for a shadow worker; when full, more are dropped
    /// (and counted in `policy_shadow_dropped_total`) rather than delay active decisions.
    #[arg(long, env = "CP_POLICY_SHADOW_QUEUE", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub policy_shadow_queue: u32,

    /// Where compiled policies' native code is kept, so a restart deserializes instead of
    /// compiling. A directory this user owns and only it can write; `policy-cache` in the data
    /// directory when absent.
    #[arg(long, env = "CP_POLICY_CACHE_DIR")]
    pub policy_cache_dir: Option<std::path::PathBuf>,

    /// `pooling` (instance slots reused, memory images mapped copy-on-write) or `on-demand`
    /// (fresh memory per decision, data copied in), which exists to measure what pooling saves.
    #[arg(long, env = "CP_POLICY_INSTANCE_ALLOCATION", default_value = "pooling",
          value_parser = crate::policy::InstanceAllocation::parse)]
    pub policy_instance_allocation: crate::policy::InstanceAllocation,

    /// Decisions a warm instance of a `per-organisation` policy serves before it is replaced.
    #[arg(long, env = "CP_POLICY_WARM_DECISIONS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub policy_warm_decisions: u32,

    /// Seconds a warm instance of a `per-organisation` policy serves before it is replaced.
    #[arg(long, env = "CP_POLICY_WARM_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub policy_warm_seconds: u64,

    /// Warm instances one organisation may hold, idle or deciding; as many as the decision
    /// slots when absent.
    #[arg(long, env = "CP_POLICY_WARM_PER_ORGANISATION",
          value_parser = clap::value_parser!(u32).range(1..=4_096))]
    pub policy_warm_per_organisation: Option<u32>,

    /// Warm instances of all organisations together; four times the decision slots (at most
    /// 64, at least the slots) when absent. Each keeps a pool slot and its memory resident.
    #[arg(long, env = "CP_POLICY_WARM_TOTAL",
          value_parser = clap::value_parser!(u32).range(1..=4_096))]
    pub policy_warm_total: Option<u32>,
    /// Fraction (0 to 1) of allowed and published policy decisions kept in the decision log;
    /// every deny, hold, reject, hide and failure is kept whatever it is.
    #[arg(long, env = "CP_POLICY_DECISION_SAMPLE", default_value = "0.01")]
    pub policy_decision_sample: crate::domain::SampleRate,

    /// The decision log keeps at most this many rows (the newest); older ones are pruned.
    #[arg(long, env = "CP_POLICY_DECISION_MAX_ROWS", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub policy_decision_max_rows: u64,

    /// The decision log keeps decisions at most this long (`7d`, `24h`).
    #[arg(long, env = "CP_POLICY_DECISION_MAX_AGE", default_value = "7d")]
    pub policy_decision_max_age: crate::domain::Span,

    /// `policy` (the active authorizer component) or `allow-all`, which authorizes everything
    /// and exists only to measure what the policy costs. Only in builds with the
    /// `bench-allow-all` feature; other builds refuse to start when `CP_AUTHORIZER` is set.
    #[cfg(feature = "bench-allow-all")]
    #[arg(long, env = "CP_AUTHORIZER", default_value = "policy", hide = true)]
    pub authorizer: String,

    /// Size of the records store's connection pool, at least 3: on Postgres two connections
    /// stay on LISTEN, and up to half of the rest serve the request path's reads.
    #[arg(long, env = "CP_DB_MAX_CONNECTIONS", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(3..))]
    pub db_max_connections: u32,
}

/// Which records store a configuration names (storage opens it).
pub use crate::storage::RecordsLocation;

impl ServerConfig {
    /// Where deliveries may go: the explicit host list when there is one, else loopback over
    /// plain http with `--dev` and https only without.
    pub fn delivery_egress(&self) -> crate::domain::EgressPolicy {
        crate::domain::EgressPolicy::configured(self.delivery_http_hosts.as_deref(), self.dev)
    }

    pub fn records(&self) -> RecordsLocation {
        records_location(self.database_url.as_deref(), &self.data_dir)
    }

    /// Defaults for a given database, as tests and embedding programs need.
    pub fn for_database(database_url: impl Into<String>) -> Self {
        Self::parse_from(["control-plane"]).on_database(database_url)
    }

    /// [`for_database`](Self::for_database) from the flags' defaults alone: no `CP_*`,
    /// `DATABASE_URL` or `REDIS_URL` in the environment is read, so a developer's shell cannot
    /// change what the test suite tests.
    pub fn defaults_for_database(database_url: impl Into<String>) -> Self {
        use clap::{CommandFactory, FromArgMatches};
        let command = Self::command().mut_args(|arg| arg.env(None));
        // Every flag has a default or is optional: without arguments this cannot fail.
        let parsed = command
            .try_get_matches_from(["control-plane"])
            .and_then(|matches| Self::from_arg_matches(&matches));
        match parsed {
            Ok(config) => config.on_database(database_url),
            Err(e) => unreachable!("the defaults do not parse: {e}"),
        }
    }

    fn on_database(mut self, database_url: impl Into<String>) -> Self {
        let config = &mut self;
        config.database_url = Some(database_url.into());
        config.listen = "127.0.0.1:0".into();
        config.token_hash_key = None;
        config.redis_url = None;
        config.read_database_url = None;
        config.idempotency_keys = None;
        config.webhook_signing_keys = None;
        config.key_encryption_key = None;
        config.key_encryption_key_file = None;
        self
    }

    /// Where compiled policies' native code is kept.
    pub fn policy_cache_dir(&self) -> std::path::PathBuf {
        self.policy_cache_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("policy-cache"))
    }

    /// Where the key-encryption key file is, when no key is given directly.
    pub fn key_file(&self) -> std::path::PathBuf {
        match &self.key_encryption_key_file {
            Some(path) => path.clone(),
            None => default_key_file(&self.records(), &self.data_dir),
        }
    }
}

/// The key-encryption key file of a store when none is configured: beside the SQLite file, or
/// in `data_dir` with Postgres.
pub fn default_key_file(
    location: &RecordsLocation,
    data_dir: &std::path::Path,
) -> std::path::PathBuf {
    match location {
        RecordsLocation::Sqlite(db) => db
            .parent()
            .map(|dir| dir.join(KEY_FILE_NAME))
            .unwrap_or_else(|| KEY_FILE_NAME.into()),
        RecordsLocation::Postgres(_) => data_dir.join(KEY_FILE_NAME),
    }
}

/// The default key-encryption key file's name.
pub const KEY_FILE_NAME: &str = "control-plane.kek";

/// `sqlite://PATH` or `sqlite:PATH` is SQLite; any other URL is Postgres; none is the
/// embedded default under `data_dir`.
pub fn records_location(url: Option<&str>, data_dir: &std::path::Path) -> RecordsLocation {
    match url.map(str::trim).filter(|u| !u.is_empty()) {
        Some(url) => match url.strip_prefix("sqlite:") {
            Some(path) => {
                let path = path.strip_prefix("//").unwrap_or(path);
                RecordsLocation::Sqlite(path.into())
            }
            None => RecordsLocation::Postgres(url.to_owned()),
        },
        None => RecordsLocation::Sqlite(data_dir.join("control-plane.db")),
    }
}

#[cfg(test)]
mod records_tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn urls_name_their_store() {
        let dir = Path::new("./data");
        assert_eq!(
            records_location(None, dir),
            RecordsLocation::Sqlite("./data/control-plane.db".into())
        );
        assert_eq!(
            records_location(Some("sqlite:///tmp/a.db"), dir),
            RecordsLocation::Sqlite("/tmp/a.db".into())
        );
        assert_eq!(
            records_location(Some("sqlite://./x.db"), dir),
            RecordsLocation::Sqlite("./x.db".into())
        );
        assert_eq!(
            records_location(Some("postgres://h/db"), dir),
            RecordsLocation::Postgres("postgres://h/db".into())
        );
    }
}
