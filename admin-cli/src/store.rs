//! `cpctl store copy`: moves every record from one records store to another (the embedded
//! SQLite file to Postgres, or back). The copy itself is storage's; this checks that no server
//! holds an embedded store involved and prints what was copied.

use anyhow::Context;
use clap::Subcommand;
use serde_json::{Value, json};

use control_plane::config::{default_key_file, records_location};
use control_plane::startup::lock_embedded_store;
use control_plane::storage::{RecordsLocation, copy_records, embedded_files};

use crate::cli::OutputFormat;
use crate::output::{self, Render};

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy every record (organisations, tokens with their hashes, policies, runners, commands,
    /// workflows, plugins, the audit log with its sequences, settings) into an empty store.
    /// Both are migrated first; the target is written in one transaction and verified (row
    /// counts, every workspace's audit sequence) before it commits. Stop the server first.
    Copy {
        /// The store to read: sqlite://PATH or postgres://…
        #[arg(long)]
        from: String,
        /// The empty store to fill: postgres://… (created when missing) or sqlite://PATH
        #[arg(long)]
        to: String,
    },
}

struct Copied {
    table: &'static str,
    rows: u64,
}

impl Render for Copied {
    fn json(&self) -> Value {
        json!({ "table": self.table, "rows": self.rows })
    }
    fn headers() -> &'static [&'static str] {
        &["TABLE", "ROWS"]
    }
    fn row(&self) -> Vec<String> {
        vec![self.table.to_owned(), self.rows.to_string()]
    }
}

/// `--from`/`--to` as a store location; a URL is never echoed (it may hold a password).
fn location(flag: &str, url: &str) -> anyhow::Result<RecordsLocation> {
    if url.trim().is_empty() {
        anyhow::bail!("{flag} needs a store URL: sqlite://PATH or postgres://…");
    }
    Ok(records_location(Some(url), std::path::Path::new(".")))
}

pub async fn run(out: OutputFormat, command: StoreCommand) -> anyhow::Result<()> {
    let StoreCommand::Copy { from, to } = command;
    let (from, to) = (location("--from", &from)?, location("--to", &to)?);
    if from == to {
        anyhow::bail!("--from and --to name the same store");
    }
    // A server on an embedded store would keep writing to the source after the copy, or into
    // the target during it: hold each file's server lock for the copy.
    let mut _locks = Vec::new();
    for (flag, location) in [("--from", &from), ("--to", &to)] {
        if let RecordsLocation::Sqlite(path) = location {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                embedded_files::create_private_dir(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            _locks.push(
                lock_embedded_store(path)
                    .with_context(|| format!("stop the server using the {flag} store first"))?,
            );
        }
    }
    let report = copy_records(&from, &to).await?;
    let needs = target_needs(&from, &to);
    let copied: Vec<Copied> = report
        .tables
        .iter()
        .map(|&(table, rows)| Copied { table, rows })
        .collect();
    let total: u64 = copied.iter().map(|c| c.rows).sum();
    match out {
        OutputFormat::Json => println!(
            "{}",
            json!({
                "tables": copied.iter().map(Render::json).collect::<Vec<_>>(),
                "rows": total,
                "workspacesVerified": report.workspaces_verified,
                "targetNeeds": needs,
            })
        ),
        OutputFormat::Table => {
            output::list(out, &copied);
            println!(
                "\ncopied {total} rows in {} tables; row counts and the audit sequences of {} \
                 workspaces verified",
                copied.len(),
                report.workspaces_verified
            );
            println!("{needs}");
        }
    }
    Ok(())
}

/// What a server on the target needs to open the copied keys: they were copied as stored,
/// wrapped with the source's key-encryption key.
fn target_needs(from: &RecordsLocation, to: &RecordsLocation) -> String {
    if std::env::var("CP_KEY_ENCRYPTION_KEY").is_ok_and(|k| !k.trim().is_empty()) {
        return "the generated keys were copied wrapped: start the target's server with the same \
                CP_KEY_ENCRYPTION_KEY"
            .into();
    }
    let data_dir: std::path::PathBuf =
        std::env::var_os("CP_DATA_DIR").map_or_else(|| "./data".into(), Into::into);
    let source = std::env::var_os("CP_KEY_ENCRYPTION_KEY_FILE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| default_key_file(from, &data_dir));
    format!(
        "the generated keys were copied wrapped: the target's server needs the source's \
         key-encryption key, {} (copy it, mode 0600, to {} or name it with \
         CP_KEY_ENCRYPTION_KEY_FILE)",
        source.display(),
        default_key_file(to, &data_dir).display()
    )
}
