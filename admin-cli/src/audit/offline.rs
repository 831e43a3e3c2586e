//! `cpctl audit verify --export FILE`: an export's chain and its proofs, checked offline with
//! the public keys given (no server, no store). The export is read into memory: it is the
//! file the operator holds, and the walk needs its events in order.

use anyhow::Context;
use serde::Deserialize;
use uuid::Uuid;

use control_plane::domain::audit_proof::{ProofKeys, Seal, SignedHead, from_hex};
use control_plane::domain::{AuditEvent, GENESIS_HASH, Timestamp, parse_jwks, parse_whpk};
use control_plane::service::audit_integrity::{Anchor, ExportSource, Proofs, verify_against};
use control_plane::storage::{AuditCheckpoint, ChainedEvent};

use super::AuditCommand;
use crate::cli::OutputFormat;

pub fn anchor_arg(raw: Option<&str>) -> anyhow::Result<Option<Anchor>> {
    raw.map(|raw| {
        raw.parse::<Anchor>()
            .map_err(|e| anyhow::anyhow!("--anchor `{raw}`: {e}"))
    })
    .transpose()
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
    super::report::finish(out, &super::report::of(&report))
}
