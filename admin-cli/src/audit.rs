//! `cpctl audit`: verify a workspace's hash chain, export its events, set an organisation's
//! retention, and run one retention pass.

use std::io::Write;

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use serde_json::json;
use uuid::Uuid;

use control_plane::domain::{AuditEvent, CorrelationId, EventJson, Span, Timestamp};
use control_plane::service::Services;
use control_plane::service::audit_integrity::ChainReport;
use control_plane::storage::TimeWindow;

use crate::cli::OutputFormat;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// One JSON object per line, exactly as the activity page writes each item.
    Ndjson,
    /// One header, fixed columns, `data` as a JSON string.
    Csv,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk a workspace's hash chain from its latest checkpoint; fails at the first event
    /// changed, deleted, inserted or reordered.
    Verify {
        #[arg(long)]
        workspace: String,
    },
    /// Write every event of a workspace in sequence order to stdout.
    Export {
        #[arg(long)]
        workspace: String,
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
    },
    /// How long an organisation keeps its audit events: a length such as 90d, or `none`
    /// (forever).
    Retention {
        organisation: String,
        retention: String,
    },
    /// Remove now the events older than their organisation's retention (the server does this
    /// in the background).
    Purge,
}

fn uuid_arg(what: &str, raw: &str) -> anyhow::Result<Uuid> {
    Uuid::parse_str(raw).map_err(|_| anyhow::anyhow!("{what} `{raw}` is not a uuid"))
}

fn time_arg(
    what: &str,
    raw: Option<&str>,
) -> anyhow::Result<Option<chrono::DateTime<chrono::Utc>>> {
    raw.map(|raw| {
        Timestamp::parse(raw)
            .map(Timestamp::get)
            .map_err(|_| anyhow::anyhow!("{what} `{raw}` is not an RFC 3339 time"))
    })
    .transpose()
}

pub async fn audit(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: AuditCommand,
) -> anyhow::Result<()> {
    match command {
        AuditCommand::Verify { workspace } => {
            let workspace = uuid_arg("--workspace", &workspace)?;
            let report = services.verify_audit_chain(workspace).await?;
            print_report(out, &report);
            if let Some(broken) = &report.broken {
                anyhow::bail!(
                    "the audit chain of workspace {workspace} is broken: event {} at sequence {}",
                    broken.problem.as_str(),
                    broken.sequence
                );
            }
        }
        AuditCommand::Export {
            workspace,
            since,
            until,
            format,
            progress_every,
        } => {
            let workspace = uuid_arg("--workspace", &workspace)?;
            let window = TimeWindow {
                since: time_arg("--since", since.as_deref())?,
                until: time_arg("--until", until.as_deref())?,
            };
            export(services, workspace, window, format, progress_every).await?;
        }
        AuditCommand::Retention {
            organisation,
            retention,
        } => {
            let organisation = uuid_arg("organisation", &organisation)?;
            let retention: Option<Span> = match retention.as_str() {
                "none" => None,
                raw => Some(
                    raw.parse::<Span>()
                        .map_err(|e| anyhow::anyhow!("retention {e}"))?,
                ),
            };
            services
                .set_audit_retention(organisation, retention, cid)
                .await?;
            let shown = retention.map(|r| r.to_string());
            match out {
                OutputFormat::Json => println!(
                    "{}",
                    json!({ "organisationId": organisation, "retention": shown,
                            "retentionSeconds": retention.map(Span::seconds) })
                ),
                OutputFormat::Table => println!(
                    "organisation {organisation} keeps audit events {}",
                    shown.map_or("forever".to_owned(), |s| format!("for {s}"))
                ),
            }
        }
        AuditCommand::Purge => {
            let removed = services.purge_expired_audit(chrono::Utc::now()).await?;
            match out {
                OutputFormat::Json => println!("{}", json!({ "removed": removed })),
                OutputFormat::Table => println!("removed {removed} audit events"),
            }
        }
    }
    Ok(())
}

fn print_report(out: OutputFormat, report: &ChainReport) {
    match out {
        OutputFormat::Json => println!(
            "{}",
            json!({
                "workspaceId": report.workspace_id,
                "intact": report.intact(),
                "checkpointSequence": report.checkpoint_seq,
                "headSequence": report.head_seq,
                "verified": report.verified,
                "broken": report.broken,
            })
        ),
        OutputFormat::Table => match &report.broken {
            None => println!(
                "ok: {} events verified (sequences {} to {})",
                report.verified,
                report.checkpoint_seq + 1,
                report.head_seq
            ),
            Some(broken) => {
                let moved = broken
                    .found_at
                    .map(|at| format!(" (now at sequence {at})"))
                    .unwrap_or_default();
                println!(
                    "broken: event {} at sequence {}{moved}; {} events verified before it",
                    broken.problem.as_str(),
                    broken.sequence,
                    report.verified
                )
            }
        },
    }
}

const CSV_HEADER: &str =
    "id,sequence,type,actor_kind,actor_id,target_kind,target_id,correlation_id,occurred_at,data";

fn csv_field(raw: &str) -> String {
    if raw.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", raw.replace('"', "\"\""))
    } else {
        raw.to_owned()
    }
}

fn csv_line(e: &AuditEvent) -> String {
    let cells = [
        e.id.to_string(),
        e.sequence.unwrap_or_default().to_string(),
        e.event_type.clone(),
        e.actor_kind.clone(),
        e.actor_id.map(|id| id.to_string()).unwrap_or_default(),
        e.target_kind.clone(),
        e.target_id.to_string(),
        e.correlation_id.clone(),
        Timestamp::new(e.occurred_at).to_string(),
        e.data.get().to_owned(),
    ];
    let cells: Vec<String> = cells.iter().map(|c| csv_field(c)).collect();
    cells.join(",")
}

/// Pages through the log (one page in memory at a time) and writes each event as it comes.
async fn export(
    services: &Services,
    workspace: Uuid,
    window: TimeWindow,
    format: ExportFormat,
    progress_every: u64,
) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    if format == ExportFormat::Csv {
        writeln!(w, "{CSV_HEADER}")?;
    }
    let (mut after, mut written) = (0, 0u64);
    loop {
        let page = services.export_audit_page(workspace, after, window).await?;
        let Some(last) = page.last() else { break };
        after = last.sequence.unwrap_or(after);
        for event in &page {
            match format {
                ExportFormat::Ndjson => {
                    serde_json::to_writer(&mut w, &EventJson::from(event))
                        .context("writing an event")?;
                    writeln!(w)?;
                }
                ExportFormat::Csv => writeln!(w, "{}", csv_line(event))?,
            }
            written += 1;
            if written.is_multiple_of(progress_every) {
                w.flush()?;
                let at = event.sequence.unwrap_or(after);
                eprintln!("exported {written} events (up to sequence {at})");
            }
        }
    }
    w.flush()?;
    if written >= progress_every {
        eprintln!("exported {written} events in all");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(
            csv_field(r#"{"a":1,"b":"x"}"#),
            r#""{""a"":1,""b"":""x""}""#
        );
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
    }
}
