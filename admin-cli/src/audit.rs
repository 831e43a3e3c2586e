//! `cpctl audit` over HTTP: verify a workspace's hash chain on the server, export its events
//! (the server's stream, written to stdout as it arrives), set an organisation's retention,
//! and purge now. `verify --export FILE` checks an export offline, with no server
//! (`offline.rs`); `report.rs` prints a report, the server's or the offline one.

mod export;
mod offline;
mod report;

use clap::{Subcommand, ValueEnum};
use serde_json::json;
use uuid::Uuid;

use control_plane::domain::{Span, parse_whpk};

use crate::cli::OutputFormat;
use crate::remote::Client;

pub use offline::verify_offline;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// One JSON object per line, exactly as the activity page writes each item.
    Ndjson,
    /// One header, fixed columns, `data` as a JSON string.
    Csv,
}

impl ExportFormat {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ndjson => "ndjson",
            Self::Csv => "csv",
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk a workspace's hash chain (on the server) from its latest checkpoint to its stored
    /// head, through every signed head, checking each checkpoint's signature and link; fails
    /// (non-zero) at the first event changed, deleted, inserted or reordered, a head that does
    /// not match, a tail cut below a signed head, a forged signed head or checkpoint, or an
    /// anchor the log no longer extends. With --export, checks an export file offline (no
    /// server) with the public keys of --jwks or --public-key.
    Verify {
        #[arg(long, required_unless_present = "export")]
        workspace: Option<Uuid>,
        /// The workspace's organisation (default: the calling token's).
        #[arg(long, conflicts_with = "export")]
        org: Option<Uuid>,
        /// A head saved earlier, SEQUENCE:HASH (hex, as `-o json` prints `headSequence` and
        /// `headHash`): fails unless the log still extends it.
        #[arg(long)]
        anchor: Option<String>,
        /// An NDJSON export (`cpctl audit export`) to verify offline, without the server.
        #[arg(long, conflicts_with = "workspace")]
        export: Option<std::path::PathBuf>,
        /// The key set to verify an export's signed heads with (the server's
        /// /.well-known/jwks.json, saved).
        #[arg(long, requires = "export")]
        jwks: Option<std::path::PathBuf>,
        /// A public key to verify an export's signed heads with, `whpk_…` (`cpctl webhooks
        /// keys`); may be repeated.
        #[arg(long, requires = "export")]
        public_key: Vec<String>,
        /// Public keys trusted only to verify audit proofs, `whpk_…,…`: old webhook keys a
        /// rotation dropped (never used to sign, never published).
        #[arg(long, env = "CP_AUDIT_VERIFY_KEYS", value_delimiter = ',')]
        audit_keys: Vec<String>,
    },
    /// Write every event of a workspace in sequence order to stdout, then the proofs an
    /// offline verify checks it with (the server signs a head at its last event).
    Export {
        #[arg(long)]
        workspace: Uuid,
        /// The workspace's organisation (default: the calling token's).
        #[arg(long)]
        org: Option<Uuid>,
        /// Events that occurred at or after this RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// Events that occurred before this RFC 3339 time.
        #[arg(long)]
        until: Option<String>,
        #[arg(long, value_enum, default_value = "ndjson")]
        format: ExportFormat,
        /// A progress line on stderr every this many events (hidden: tests lower it).
        #[arg(long, default_value_t = 10_000, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
        progress_every: u64,
        /// Public keys trusted only to verify the chain before the server signs, `whpk_…,…`
        /// (as verify takes them): old webhook keys a rotation dropped. An operator's only, so
        /// never read from CP_AUDIT_VERIFY_KEYS: an admin's environment must not make exports fail.
        #[arg(long, value_delimiter = ',')]
        audit_keys: Vec<String>,
    },
    /// How long an organisation keeps its audit events: a length such as 90d, or `none`
    /// (forever). An operator's.
    Retention {
        organisation: Uuid,
        retention: String,
    },
    /// Remove now the events older than their organisation's retention (the server does this
    /// in the background). An operator's.
    Purge,
}

impl AuditCommand {
    /// Whether it runs offline (`verify --export`): no server.
    pub fn is_offline(&self) -> bool {
        matches!(
            self,
            Self::Verify {
                export: Some(_),
                ..
            }
        )
    }
}

fn time_arg(what: &str, raw: Option<String>) -> anyhow::Result<Option<String>> {
    raw.map(|raw| {
        control_plane::domain::Timestamp::parse(&raw)
            .map(|t| t.to_string())
            .map_err(|_| anyhow::anyhow!("{what} `{raw}` is not an RFC 3339 time"))
    })
    .transpose()
}

/// The keys of `--audit-keys` (or CP_AUDIT_VERIFY_KEYS), checked here; sent as given.
fn audit_keys_arg(raw: &[String]) -> anyhow::Result<Vec<String>> {
    raw.iter()
        .map(|k| k.trim())
        .filter(|k| !k.is_empty())
        .map(|k| {
            parse_whpk(k)
                .map(|_| k.to_owned())
                .map_err(|e| anyhow::anyhow!("--audit-keys: {e}"))
        })
        .collect()
}

fn workspace_path(org: &str, workspace: Uuid) -> String {
    format!("/v1/organisations/{org}/workspaces/{workspace}/audit")
}

pub async fn run(client: &Client, out: OutputFormat, command: AuditCommand) -> anyhow::Result<()> {
    match command {
        AuditCommand::Verify {
            export: Some(_), ..
        } => {
            unreachable!("verify --export runs offline (commands.rs)")
        }
        AuditCommand::Verify {
            workspace,
            org,
            anchor,
            audit_keys,
            ..
        } => {
            let workspace = workspace.expect("clap requires --workspace without --export");
            let mut query = Vec::new();
            if let Some(anchor) = anchor {
                offline::anchor_arg(Some(&anchor))?;
                query.push(("anchor", anchor));
            }
            let keys = audit_keys_arg(&audit_keys)?;
            if !keys.is_empty() {
                query.push(("auditKeys", keys.join(",")));
            }
            let org = client.organisation(org).await?;
            let path = format!("{}/verification", workspace_path(&org, workspace));
            let body = client.get_with(&path, &query).await?;
            report::finish(out, &body["verification"])
        }
        AuditCommand::Export {
            workspace,
            org,
            since,
            until,
            format,
            progress_every,
            audit_keys,
        } => {
            let mut query = vec![("format", format.as_str().to_owned())];
            if let Some(since) = time_arg("--since", since)? {
                query.push(("since", since));
            }
            if let Some(until) = time_arg("--until", until)? {
                query.push(("until", until));
            }
            let keys = audit_keys_arg(&audit_keys)?;
            if !keys.is_empty() {
                query.push(("auditKeys", keys.join(",")));
            }
            let org = client.organisation(org).await?;
            let path = format!("{}/export", workspace_path(&org, workspace));
            let response = client.download(&path, &query).await?;
            export::write(response, format, progress_every).await
        }
        AuditCommand::Retention {
            organisation,
            retention,
        } => {
            let retention: Option<Span> = match retention.as_str() {
                "none" => None,
                raw => Some(
                    raw.parse::<Span>()
                        .map_err(|e| anyhow::anyhow!("retention {e}"))?,
                ),
            };
            if retention.is_some_and(Span::is_zero) {
                anyhow::bail!("retention must be longer than 0s, or none");
            }
            let path = format!("/v1/organisations/{organisation}/audit-retention");
            let body = client
                .change(
                    reqwest::Method::PUT,
                    &path,
                    json!({ "retentionSeconds": retention.map(Span::seconds) }),
                )
                .await?;
            let set = &body["auditRetention"];
            match out {
                OutputFormat::Json => println!("{set}"),
                OutputFormat::Table => println!(
                    "organisation {organisation} keeps audit events {}",
                    set["retention"]
                        .as_str()
                        .map_or("forever".to_owned(), |s| format!("for {s}"))
                ),
            }
            Ok(())
        }
        AuditCommand::Purge => {
            let body = client.post("/v1/audit/purge", json!({})).await?;
            let purge = &body["purge"];
            match out {
                OutputFormat::Json => println!("{purge}"),
                OutputFormat::Table => println!(
                    "removed {} audit events",
                    purge["removed"].as_u64().unwrap_or(0)
                ),
            }
            Ok(())
        }
    }
}
