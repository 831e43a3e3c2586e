//! `cpctl audit`: verify a workspace's hash chain, export its events, set an organisation's
//! retention, and run one retention pass.

use std::io::Write;

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use serde_json::json;
use uuid::Uuid;

use serde::Deserialize;

use control_plane::domain::audit_proof::{ProofKeys, Seal, SignedHead, from_hex, to_hex};
use control_plane::domain::{
    AuditEvent, CorrelationId, EventJson, GENESIS_HASH, Span, Timestamp, parse_jwks, parse_whpk,
};
use control_plane::service::Services;
use control_plane::service::audit_integrity::{
    Anchor, ChainProblem, ChainReport, ExportSource, Proofs, verify_against,
};
use control_plane::storage::{AuditCheckpoint, ChainedEvent, TimeWindow};

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
    /// Walk a workspace's hash chain from its latest checkpoint to its stored head, through
    /// every signed head, checking each checkpoint's signature and link; fails (non-zero) at
    /// the first event changed, deleted, inserted or reordered, a head that does not match, a
    /// tail cut below a signed head, a forged signed head or checkpoint, or an anchor the log
    /// no longer extends. With --export, checks an export file offline (no store) with the
    /// public keys of --jwks or --public-key.
    Verify {
        #[arg(long, required_unless_present = "export")]
        workspace: Option<String>,
        /// A head saved earlier, SEQUENCE:HASH (hex, as `-o json` prints `headSequence` and
        /// `headHash`): fails unless the log still extends it.
        #[arg(long)]
        anchor: Option<String>,
        /// An NDJSON export (`cpctl audit export`) to verify offline, without the store.
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
        /// Public keys trusted only to verify the chain before signing, `whpk_…,…` (as verify
        /// takes them): old webhook keys a rotation dropped.
        #[arg(long, env = "CP_AUDIT_VERIFY_KEYS", value_delimiter = ',')]
        audit_keys: Vec<String>,
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
        AuditCommand::Verify {
            workspace,
            anchor,
            audit_keys,
            ..
        } => {
            let workspace = uuid_arg("--workspace", workspace.as_deref().unwrap_or_default())?;
            let anchor = anchor_arg(anchor.as_deref())?;
            let extra = audit_keys_arg(&audit_keys)?;
            let report = services
                .verify_audit_chain_with(workspace, anchor, extra)
                .await?;
            finish_report(out, &report)?;
        }
        AuditCommand::Export {
            workspace,
            since,
            until,
            format,
            progress_every,
            audit_keys,
        } => {
            let workspace = uuid_arg("--workspace", &workspace)?;
            let extra = audit_keys_arg(&audit_keys)?;
            let window = TimeWindow {
                since: time_arg("--since", since.as_deref())?,
                until: time_arg("--until", until.as_deref())?,
            };
            export(services, workspace, window, format, progress_every, extra).await?;
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

fn anchor_arg(raw: Option<&str>) -> anyhow::Result<Option<Anchor>> {
    raw.map(|raw| {
        raw.parse::<Anchor>()
            .map_err(|e| anyhow::anyhow!("--anchor `{raw}`: {e}"))
    })
    .transpose()
}

/// Prints the report, then fails (a one-line error, non-zero exit) when it is broken.
fn finish_report(out: OutputFormat, report: &ChainReport) -> anyhow::Result<()> {
    print_report(out, report);
    if let Some(broken) = &report.broken {
        anyhow::bail!(
            "the audit chain of workspace {} is broken: {} at sequence {} ({})",
            report.workspace_id,
            broken.problem.as_str(),
            broken.sequence,
            match &broken.kid {
                Some(kid) => format!("{}: key {kid}", broken.problem.describe()),
                None => broken.problem.describe().to_owned(),
            }
        );
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
                "headHash": report.head_hash,
                "verified": report.verified,
                "signedHeadSequence": report.signed_head_seq,
                "signedHeadsMatched": report.signed_heads_matched,
                "checkpoints": report.checkpoints,
                "anchorExtended": report.anchor_extended,
                "broken": report.broken,
            })
        ),
        OutputFormat::Table => match &report.broken {
            None => {
                println!(
                    "ok: {} events verified (sequences {} to {}); head {}:{}",
                    report.verified,
                    report.checkpoint_seq + 1,
                    report.head_seq,
                    report.head_seq,
                    report.head_hash
                );
                match report.signed_head_seq {
                    Some(seq) => println!(
                        "signed heads: {} matched, the latest at sequence {seq}",
                        report.signed_heads_matched
                    ),
                    None => println!(
                        "signed heads: none yet (the chain is only consistent with itself)"
                    ),
                }
                if report.anchor_extended == Some(true) {
                    println!("anchor: the log extends it");
                }
            }
            Some(broken) => {
                let moved = broken
                    .found_at
                    .map(|at| format!(" (now at sequence {at})"))
                    .unwrap_or_default();
                let what = match broken.problem {
                    ChainProblem::Changed
                    | ChainProblem::Deleted
                    | ChainProblem::Inserted
                    | ChainProblem::Reordered => format!("event {}", broken.problem.as_str()),
                    other => other.describe().to_owned(),
                };
                println!(
                    "broken: {what} at sequence {}{moved}; {} events verified before it",
                    broken.sequence, report.verified
                )
            }
        },
    }
}

const CSV_HEADER: &str = "id,sequence,type,actor_kind,actor_id,target_kind,target_id,correlation_id,occurred_at,data,actor_token_id";

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
        e.actor_token_id
            .map(|id| id.to_string())
            .unwrap_or_default(),
    ];
    let cells: Vec<String> = cells.iter().map(|c| csv_field(c)).collect();
    cells.join(",")
}

/// The first line of an NDJSON export: which workspace, and where its chain starts.
fn header_line(workspace: Uuid, from: i64, hash: Option<&[u8]>) -> serde_json::Value {
    json!({ "auditExport": {
        "version": 1,
        "workspaceId": workspace,
        "chainFrom": { "sequence": from, "hash": hash.map(to_hex) },
    }})
}

fn signed_head_json(h: &SignedHead) -> serde_json::Value {
    json!({ "signedHead": {
        "workspaceId": h.workspace_id,
        "sequence": h.seq,
        "hash": to_hex(&h.hash),
        "signedAtMs": h.seal.signed_at_ms,
        "kid": h.seal.kid,
        "signature": to_hex(&h.seal.signature),
    }})
}

fn checkpoint_json(c: &AuditCheckpoint) -> serde_json::Value {
    json!({ "checkpoint": {
        "workspaceId": c.workspace_id,
        "sequence": c.last_seq,
        "hash": c.hash.as_deref().map(to_hex),
        "removed": c.removed,
        "previousSequence": c.prev_seq,
        "previousHash": c.prev_hash.as_deref().map(to_hex),
        "signedAtMs": c.seal.as_ref().map(|s| s.signed_at_ms),
        "kid": c.seal.as_ref().map(|s| s.kid.clone()),
        "signature": c.seal.as_ref().map(|s| to_hex(&s.signature)),
    }})
}

/// A proof as a CSV row: no id, the proof's sequence, its kind as the type, and the proof's
/// JSON as `data`.
fn csv_proof_line(kind: &str, seq: i64, proof: &serde_json::Value) -> String {
    format!(",{seq},{kind},,,,,,,{}", csv_field(&proof.to_string()))
}

/// Pages through the log (one page in memory at a time) and writes each event as it comes,
/// then the proofs: every checkpoint and the signed heads over the exported range, with a
/// head signed now at the export's last event (NDJSON: one `{"checkpoint": …}` or
/// `{"signedHead": …}` object a line after the events, the first line `{"auditExport": …}`).
async fn export(
    services: &Services,
    workspace: Uuid,
    window: TimeWindow,
    format: ExportFormat,
    progress_every: u64,
    extra: Vec<ed25519_dalek::VerifyingKey>,
) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    if format == ExportFormat::Csv {
        writeln!(w, "{CSV_HEADER}")?;
    }
    let (mut after, mut written) = (0, 0u64);
    let mut first: Option<i64> = None;
    loop {
        let page = services.export_audit_page(workspace, after, window).await?;
        let Some(last) = page.last() else { break };
        after = last.sequence.unwrap_or(after);
        for event in &page {
            if first.is_none() {
                let from = event.sequence.unwrap_or(1) - 1;
                first = Some(from);
                if format == ExportFormat::Ndjson {
                    let hash = services.chain_hash_at(workspace, from).await?;
                    serde_json::to_writer(&mut w, &header_line(workspace, from, hash.as_deref()))?;
                    writeln!(w)?;
                }
            }
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
    if let Some(from) = first {
        let proofs = services
            .export_proofs(workspace, from, after, chrono::Utc::now(), extra)
            .await?;
        if let Some(kid) = &proofs.not_signed_kid {
            eprintln!(
                "warning: not signing a fresh head: the latest signed head carries key {kid}, \
                 which this cpctl does not hold (configure CP_WEBHOOK_SIGNING_KEYS as the \
                 server's); the export carries only the heads signed before"
            );
        }
        let not_signed = proofs.not_signed_kid.is_some();
        let (checkpoints, heads) = (proofs.checkpoints, proofs.heads);
        for c in &checkpoints {
            let line = checkpoint_json(c);
            match format {
                ExportFormat::Ndjson => writeln!(w, "{line}")?,
                ExportFormat::Csv => writeln!(
                    w,
                    "{}",
                    csv_proof_line("audit.checkpoint", c.last_seq, &line)
                )?,
            }
        }
        for h in &heads {
            let line = signed_head_json(h);
            match format {
                ExportFormat::Ndjson => writeln!(w, "{line}")?,
                ExportFormat::Csv => {
                    writeln!(w, "{}", csv_proof_line("audit.signed_head", h.seq, &line))?
                }
            }
        }
        if !not_signed && !heads.iter().any(|h| h.seq == after) {
            eprintln!(
                "warning: no signed head at sequence {after}: the chain did not verify, so \
                 this export's tail is unproven (run cpctl audit verify)"
            );
        }
    }
    w.flush()?;
    if written >= progress_every {
        eprintln!("exported {written} events in all");
    }
    Ok(())
}

/// One event line of an export, as `EventJson` writes it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExportedEvent {
    id: Uuid,
    sequence: i64,
    #[serde(rename = "type")]
    event_type: String,
    actor: ExportedActor,
    target: ExportedTarget,
    correlation_id: String,
    occurred_at: Timestamp,
    data: Box<serde_json::value::RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExportedActor {
    kind: String,
    id: Option<Uuid>,
    #[serde(default)]
    token_id: Option<Uuid>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportedTarget {
    kind: String,
    id: Uuid,
}

fn hex_field(v: &serde_json::Value, what: &str) -> anyhow::Result<Option<Vec<u8>>> {
    match v {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => from_hex(s)
            .map(Some)
            .ok_or_else(|| anyhow::anyhow!("the export's {what} is not hex")),
        _ => anyhow::bail!("the export's {what} is not hex"),
    }
}

fn int_field(v: &serde_json::Value, what: &str) -> anyhow::Result<i64> {
    v.as_i64()
        .ok_or_else(|| anyhow::anyhow!("the export's {what} is not a number"))
}

/// A sequence of the export: `0..i64::MAX - 1`, so the walk's `+ 1`s never overflow.
fn seq_field(v: &serde_json::Value, what: &str) -> anyhow::Result<i64> {
    let seq = int_field(v, what)?;
    check_seq(seq, what)
}

fn check_seq(seq: i64, what: &str) -> anyhow::Result<i64> {
    if !(0..i64::MAX - 1).contains(&seq) {
        anyhow::bail!("the export's {what} {seq} is out of range");
    }
    Ok(seq)
}

fn uuid_field(v: &serde_json::Value, what: &str) -> anyhow::Result<Uuid> {
    v.as_str()
        .and_then(|s| Uuid::parse_str(s).ok())
        .ok_or_else(|| anyhow::anyhow!("the export's {what} is not a uuid"))
}

fn seal_of(v: &serde_json::Value) -> anyhow::Result<Option<Seal>> {
    if v["signature"].is_null() {
        return Ok(None);
    }
    Ok(Some(Seal {
        kid: v["kid"].as_str().unwrap_or_default().to_owned(),
        signed_at_ms: int_field(&v["signedAtMs"], "signedAtMs")?,
        signature: hex_field(&v["signature"], "signature")?.unwrap_or_default(),
    }))
}

/// The keys of `--audit-keys` (or CP_AUDIT_VERIFY_KEYS).
fn audit_keys_arg(raw: &[String]) -> anyhow::Result<Vec<ed25519_dalek::VerifyingKey>> {
    raw.iter()
        .map(|k| k.trim())
        .filter(|k| !k.is_empty())
        .map(|k| parse_whpk(k).map_err(|e| anyhow::anyhow!("--audit-keys: {e}")))
        .collect()
}

/// The keys of `--jwks` and `--public-key`.
fn offline_keys(jwks: Option<&std::path::Path>, public: &[String]) -> anyhow::Result<ProofKeys> {
    let mut keys = Vec::new();
    if let Some(path) = jwks {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --jwks {}", path.display()))?;
        let set: serde_json::Value =
            serde_json::from_str(&text).context("the --jwks file is not JSON")?;
        keys.extend(parse_jwks(&set).map_err(anyhow::Error::msg)?);
    }
    for k in public {
        keys.push(parse_whpk(k).map_err(|e| anyhow::anyhow!("--public-key: {e}"))?);
    }
    if keys.is_empty() {
        anyhow::bail!("verifying an export needs the server's public keys: --jwks or --public-key");
    }
    Ok(ProofKeys::new(keys))
}

/// `cpctl audit verify --export FILE`: the export's chain and its proofs, offline.
pub async fn verify_offline(out: OutputFormat, command: AuditCommand) -> anyhow::Result<()> {
    let AuditCommand::Verify {
        anchor,
        export: Some(path),
        jwks,
        public_key,
        audit_keys,
        ..
    } = command
    else {
        anyhow::bail!("audit verify --export FILE");
    };
    let keys = offline_keys(jwks.as_deref(), &public_key)?.with(audit_keys_arg(&audit_keys)?);
    let anchor = anchor_arg(anchor.as_deref())?;
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the export {}", path.display()))?;
    let (mut workspace, mut start) = (None, (0, GENESIS_HASH.to_vec()));
    let (mut events, mut checkpoints, mut heads) = (Vec::new(), Vec::new(), Vec::new());
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at = || format!("line {} of the export", n + 1);
        let value: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{} is not JSON", at()))?;
        if let Some(h) = value.get("auditExport") {
            if workspace.is_some() {
                anyhow::bail!("{} is a second auditExport line", at());
            }
            workspace = Some(uuid_field(&h["workspaceId"], "workspaceId")?);
            let from = seq_field(&h["chainFrom"]["sequence"], "chainFrom")?;
            let hash = hex_field(&h["chainFrom"]["hash"], "chainFrom hash")?;
            start = (from, hash.unwrap_or_else(|| GENESIS_HASH.to_vec()));
        } else if let Some(h) = value.get("signedHead") {
            heads.push(SignedHead {
                workspace_id: uuid_field(&h["workspaceId"], "workspaceId")?,
                seq: seq_field(&h["sequence"], "sequence")?,
                hash: hex_field(&h["hash"], "hash")?.unwrap_or_default(),
                seal: seal_of(h)?.unwrap_or(Seal {
                    kid: String::new(),
                    signed_at_ms: 0,
                    signature: Vec::new(),
                }),
            });
        } else if let Some(c) = value.get("checkpoint") {
            checkpoints.push(AuditCheckpoint {
                workspace_id: uuid_field(&c["workspaceId"], "workspaceId")?,
                last_seq: seq_field(&c["sequence"], "sequence")?,
                hash: hex_field(&c["hash"], "hash")?,
                removed: int_field(&c["removed"], "removed")?,
                created_at: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
                prev_seq: c["previousSequence"]
                    .as_i64()
                    .map(|s| check_seq(s, "previousSequence"))
                    .transpose()?,
                prev_hash: hex_field(&c["previousHash"], "previousHash")?,
                seal: seal_of(c)?,
            });
        } else {
            let e: ExportedEvent = serde_json::from_value(value)
                .with_context(|| format!("{} is not an event", at()))?;
            check_seq(e.sequence, "sequence")?;
            let workspace_id = workspace
                .ok_or_else(|| anyhow::anyhow!("the export has no auditExport line first"))?;
            events.push(ChainedEvent {
                event: AuditEvent {
                    id: e.id,
                    organisation_id: Uuid::nil(),
                    workspace_id: Some(workspace_id),
                    sequence: Some(e.sequence),
                    event_type: e.event_type,
                    actor_kind: e.actor.kind,
                    actor_id: e.actor.id,
                    actor_token_id: e.actor.token_id,
                    target_kind: e.target.kind,
                    target_id: e.target.id,
                    correlation_id: e.correlation_id,
                    occurred_at: e.occurred_at.get(),
                    data: e.data,
                },
                hash: None,
            });
        }
    }
    let workspace_id =
        workspace.ok_or_else(|| anyhow::anyhow!("the export has no auditExport line"))?;
    events.sort_by_key(|e| e.event.sequence);
    heads.sort_by_key(|h| h.seq);
    checkpoints.sort_by_key(|c| c.last_seq);
    let proofs = Proofs {
        workspace_id,
        head: None,
        start: Some(start),
        checkpoints,
        signed_heads: heads,
        keys,
        anchor,
    };
    let report = verify_against(&ExportSource(events), &proofs).await?;
    finish_report(out, &report)
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
