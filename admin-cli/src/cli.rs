use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

use clap_complete::Shell;
use uuid::Uuid;

use control_plane::domain::{RevocationReason, Role, Span};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// Admin CLI of the control plane: organisations, workspaces, users, tokens, policies, runners,
/// workflows and plugins.
#[derive(Debug, Parser)]
#[command(name = "cpctl", version)]
pub struct Cli {
    /// Records store the server uses: postgres://… or sqlite://PATH. Without it, the embedded
    /// default: SQLite at DATA_DIR/control-plane.db (safe while the server runs).
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Data directory of the embedded default (as the server's --data-dir).
    #[arg(long, global = true, env = "CP_DATA_DIR", default_value = "./data")]
    pub data_dir: std::path::PathBuf,

    /// Base64 token hashing key; must match the server's when the server sets one.
    #[arg(long, global = true, env = "CP_TOKEN_HASH_KEY", hide_env_values = true)]
    pub token_hash_key: Option<String>,

    /// The server's webhook signing keys (as its --webhook-signing-keys), when it sets them;
    /// otherwise the key kept in the records store is used.
    #[arg(
        long,
        global = true,
        env = "CP_WEBHOOK_SIGNING_KEYS",
        hide_env_values = true
    )]
    pub webhook_signing_keys: Option<String>,

    /// The server's key-encryption key (as its --key-encryption-key): it unwraps the keys kept
    /// in the records store.
    #[arg(
        long,
        global = true,
        env = "CP_KEY_ENCRYPTION_KEY",
        hide_env_values = true
    )]
    pub key_encryption_key: Option<String>,

    /// The server's key-encryption key file (as its --key-encryption-key-file). Default:
    /// control-plane.kek beside the SQLite file, or in DATA_DIR with Postgres.
    #[arg(long, global = true, env = "CP_KEY_ENCRYPTION_KEY_FILE")]
    pub key_encryption_key_file: Option<std::path::PathBuf>,

    /// The context (kept by `cpctl login`) of this command's HTTP verbs; default: the current
    /// one. `CPCTL_SERVER` and `CPCTL_TOKEN` override it.
    #[arg(long, global = true)]
    pub context: Option<String>,

    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        global = true,
        value_enum,
        default_value = "table"
    )]
    pub output: OutputFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create an organisation, a workspace, an admin user and a token with every scope.
    Bootstrap {
        #[arg(long)]
        org: String,
        #[arg(long)]
        workspace: String,
        /// Email of the admin user.
        #[arg(long)]
        admin: String,
        #[arg(long, default_value_t = 30)]
        expires_in_days: i64,
        /// The server's listen address (as its --listen), for the first steps printed after.
        #[arg(long, env = "CP_LISTEN", default_value = "127.0.0.1:8080")]
        listen: String,
    },
    /// Apply pending database migrations.
    Migrate,
    /// A new token for an existing operator when every operator token is lost: only
    /// `admin:read` and `admin:write`, printed once. Opens the records store (whoever holds it
    /// could do as much); audited as `token.issued`.
    Recover {
        /// The operator's email.
        #[arg(long)]
        operator: String,
        #[arg(long, default_value_t = 1)]
        expires_in_days: i64,
        /// The server's listen address (as its --listen), for the `cpctl login` line printed.
        #[arg(long, env = "CP_LISTEN", default_value = "127.0.0.1:8080")]
        listen: String,
    },
    /// The records store itself: copy every record into another store.
    #[command(subcommand)]
    Store(crate::store::StoreCommand),
    /// Organisations.
    #[command(subcommand)]
    Orgs(OrgsCommand),
    /// Workspaces.
    #[command(subcommand)]
    Workspaces(WorkspacesCommand),
    /// Environments of a workspace.
    #[command(subcommand)]
    Environments(EnvironmentsCommand),
    /// Users of an organisation.
    #[command(subcommand)]
    Users(UsersCommand),
    /// Personal access tokens.
    #[command(subcommand)]
    Tokens(TokensCommand),
    /// Policy components: install, activate, roll back, test, shadow.
    #[command(subcommand)]
    Policies(PoliciesCommand),
    /// Runner pools of a workspace.
    #[command(subcommand)]
    Pools(crate::pools::PoolsCommand),
    /// Runners, their keys, and signing a report as a runner.
    #[command(subcommand)]
    Runners(crate::runners::RunnersCommand),
    /// The audit log: verify its hash chain, export it, retention.
    #[command(subcommand)]
    Audit(crate::audit::AuditCommand),
    /// Webhook deliveries of runner commands and their attempts.
    #[command(subcommand)]
    Deliveries(crate::deliveries::DeliveriesCommand),
    /// The control plane's webhook signing keys, as runners verify them.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// Workflows and their revisions.
    #[command(subcommand)]
    Workflows(crate::workflows::WorkflowsCommand),
    /// Marketplace plugins.
    #[command(subcommand)]
    Plugins(crate::marketplace::PluginsCommand),
    /// Reviews of a plugin.
    #[command(subcommand)]
    Reviews(crate::marketplace::ReviewsCommand),
    /// Keep a context: the server's URL and a token read from standard input (never an
    /// argument), checked with the server first; it becomes the current context.
    Login {
        /// The server's base URL: https, or http to a loopback address.
        #[arg(long)]
        server: String,
        /// The context's name; default: the server's host and port.
        #[arg(long)]
        name: Option<String>,
    },
    /// The contexts `cpctl login` kept.
    #[command(subcommand)]
    Context(crate::remote::ContextCommand),
    /// Who the current context's token is, asked of its server.
    Whoami,
    /// Print a shell completion script.
    Completion {
        #[arg(value_enum)]
        shell: Shell,
    },
}

#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Print each public key (key id, `whpk_` form, JWK `x`), marking the current one; the
    /// server publishes the same at /.well-known/jwks.json.
    Keys,
}

#[derive(Debug, Subcommand)]
pub enum OrgsCommand {
    Create {
        name: String,
    },
    List,
    /// Whether the user who requested a workflow revision's approval may approve it too
    /// (`refuse` by default; an operator's; audited as `organisation.self_approval_set`).
    SelfApproval {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(value_enum)]
        rule: SelfApprovalRule,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SelfApprovalRule {
    /// The requester may approve their own revision.
    Allow,
    /// Another administrator must approve it.
    Refuse,
}

#[derive(Debug, Subcommand)]
pub enum WorkspacesCommand {
    Create {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        name: String,
    },
    List {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
    },
}

#[derive(Debug, Subcommand)]
pub enum EnvironmentsCommand {
    Create {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        workspace: Uuid,
        name: String,
    },
    List {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        workspace: Uuid,
    },
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    Create {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        email: String,
        /// `member`, `admin` (administers its organisation: decides workflow approvals, may
        /// hold the admin scopes) or `operator` (the whole instance).
        #[arg(long, default_value = "member", value_parser = Role::parse)]
        role: Role,
    },
    List {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// Disable a user: none of its tokens authenticates, on any replica, until `enable`.
    /// Disabling a disabled user changes nothing (its first time and reason are kept).
    Disable {
        #[arg(value_name = "USER_ID")]
        user: Uuid,
        /// Why, kept with the user and in the `user.disabled` audit event.
        #[arg(long, value_parser = RevocationReason::parse)]
        reason: Option<RevocationReason>,
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// Enable a disabled user: its tokens that are not revoked or expired authenticate again.
    Enable {
        #[arg(value_name = "USER_ID")]
        user: Uuid,
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// Change a user's role. Lowered, its tokens lose the admin scopes at once, on every
    /// replica; setting the role it has changes nothing.
    SetRole {
        #[arg(value_name = "USER_ID")]
        user: Uuid,
        #[arg(long, value_parser = Role::parse)]
        role: Role,
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// Show a user, whether and why it is disabled, and its tokens.
    Show {
        #[arg(value_name = "USER_ID")]
        user: Uuid,
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Issue a token for a user; prints the secret once.
    Issue(IssueArgs),
    /// List tokens, oldest first, with their last use; every filter narrows the list.
    List {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        user: Option<Uuid>,
        #[arg(long)]
        workspace: Option<Uuid>,
        /// Only live tokens expiring within this length of time (`7d`, `48h`).
        #[arg(long, value_name = "SPAN")]
        expiring_within: Option<Span>,
        /// Only live tokens not used for this length of time (`30d`); a token never used
        /// counts once it is older than that.
        #[arg(long, value_name = "SPAN")]
        unused_for: Option<Span>,
    },
    /// Show one token, with the token that issued it and its last use.
    Show {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        id: Uuid,
    },
    /// Revoke a token's access to one workspace, or with `--cascade` the whole token and every
    /// token it issued, transitively, in one transaction.
    Revoke {
        #[arg(long)]
        token: Uuid,
        #[arg(long, required_unless_present = "cascade", conflicts_with = "cascade")]
        workspace: Option<Uuid>,
        #[arg(long)]
        reason: String,
        /// Revoke the whole token and all its descendants (each grant with its audit event).
        #[arg(long)]
        cascade: bool,
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
    },
    /// Give a token a new secret (printed once), keeping everything else; the old secret
    /// works until the grace ends (without `--grace`, it stops at once).
    Rotate {
        #[arg(value_name = "TOKEN_ID")]
        token: Uuid,
        /// How long the old secret keeps working: `90s`, `15m`, `24h`, `7d` (at most 30d).
        #[arg(long)]
        grace: Option<Span>,
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
    },
}

#[derive(Debug, Args)]
pub struct IssueArgs {
    /// The organisation; default: the calling token's.
    #[arg(long)]
    pub org: Option<Uuid>,
    #[arg(long)]
    pub user: Uuid,
    #[arg(long)]
    pub name: String,
    /// A scope; repeat for several.
    #[arg(long = "scope", required = true)]
    pub scopes: Vec<String>,
    /// A workspace; repeat for several.
    #[arg(long = "workspace", required = true)]
    pub workspaces: Vec<Uuid>,
    /// An environment; repeat for several (none: every environment).
    #[arg(long = "environment")]
    pub environments: Vec<Uuid>,
    #[arg(long, default_value_t = 30)]
    pub expires_in_days: i64,
}

#[derive(Debug, Subcommand)]
pub enum PoliciesCommand {
    /// Send a component to the server, which checks that it implements its world, measures
    /// its decisions (as `bench`, with the server's settings) and stores it, with the
    /// measurement, as the next version of NAME; refused over its budgets unless `--force`.
    Install {
        file: PathBuf,
        /// authorizer or moderator
        #[arg(long)]
        kind: String,
        #[arg(long)]
        name: String,
        /// This version's memory budget, 1 to 256 MiB (default: the server's).
        #[arg(long = "memory-mib", value_parser = crate::policy_budgets::parse_memory_mib)]
        memory: Option<control_plane::policy::MemoryBudget>,
        /// Cases to measure with (default: the shipped cases of KIND); at most 64 KiB.
        #[arg(long)]
        cases: Option<PathBuf>,
        /// Store it even over its budgets (recorded); its activation still needs `--force`.
        #[arg(long)]
        force: bool,
        /// `fresh` (a new instance for every decision) or `per-organisation` (warm instances,
        /// each serving the decisions of one organisation only).
        #[arg(long, default_value = "fresh", value_parser = control_plane::policy::Instances::parse)]
        instances: control_plane::policy::Instances,
    },
    /// Measure a component without installing it: 200 decisions in fresh instances, p50, p99,
    /// max and peak memory against the deadline and the memory budget.
    Bench {
        file: PathBuf,
        /// authorizer or moderator
        #[arg(long)]
        kind: String,
        /// Cases to measure with (default: the shipped cases of KIND).
        #[arg(long)]
        cases: Option<PathBuf>,
        /// The memory budget to measure against, 1 to 256 MiB (default: CP_POLICY_MEMORY_MIB).
        #[arg(long = "memory-mib", value_parser = crate::policy_budgets::parse_memory_mib)]
        memory: Option<control_plane::policy::MemoryBudget>,
    },
    /// Every stored version, and which are active or in shadow.
    List,
    /// One version: NAME@VERSION.
    Show { policy: String },
    /// Make NAME@VERSION the active policy of its kind on every replica (within a second).
    /// Refused when the version's measured p99 reaches the deadline or its peak memory
    /// exceeded its budget, unless `--force` (recorded with the activation).
    Activate {
        policy: String,
        #[arg(long)]
        force: bool,
    },
    /// Return KIND (authorizer or moderator) to the policy active before the last activation.
    Rollback { kind: String },
    /// Delete a version that was never activated and is not in shadow.
    Remove { policy: String },
    /// Write a ready policy project in DIR (default ./NAME): the WIT, the default policy's
    /// logic in LANG, its cases, a build script with pinned tools, a README.
    New {
        name: String,
        #[arg(long, value_enum)]
        kind: crate::policy_new::Kind,
        #[arg(long, value_enum)]
        lang: crate::policy_new::Lang,
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Evaluate a component against a file of cases, and report what they cover; exits
    /// non-zero on any mismatch.
    Test {
        file: PathBuf,
        #[arg(long)]
        cases: PathBuf,
        /// authorizer or moderator
        #[arg(long, default_value = "authorizer")]
        kind: String,
        /// Exit non-zero, naming what is missing, unless every operation has an allowed and a
        /// denied case (moderator: every verdict is reached).
        #[arg(long)]
        require_coverage: bool,
    },
    /// Evaluate authorizer NAME@VERSION beside the active one on live traffic, recording every
    /// disagreement without affecting decisions. `--off` stops it.
    Shadow {
        #[arg(required_unless_present = "off")]
        policy: Option<String>,
        #[arg(long, conflicts_with = "policy")]
        off: bool,
    },
    /// The latest disagreements of the shadow policy.
    ShadowReport {
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Logged policy decisions, newest first: every deny and failure, a sample of the allows.
    Decisions(crate::policy_decisions::DecisionsArgs),
}
