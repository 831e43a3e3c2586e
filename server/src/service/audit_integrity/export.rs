//! A workspace's audit export as a stream of bytes: the events a page at a time (one page in
//! memory), then the proofs that let `cpctl audit verify --export` check it offline (every
//! checkpoint, the signed heads over the range, and a head signed now at its last event).
//! NDJSON: a first `{"auditExport": …}` line, one event a line as the activity page writes
//! it, then one `{"checkpoint": …}` or `{"signedHead": …}` a line. CSV: a header, one event a
//! row, then each proof as a row with its JSON in `data`.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::Stream;

use super::*;
use crate::domain::{EventJson, Timestamp};

/// How an export is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExportFormat {
    /// One JSON object per line.
    #[default]
    Ndjson,
    /// One header, fixed columns, `data` as a JSON string.
    Csv,
}

impl ExportFormat {
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Ndjson => "application/x-ndjson",
            Self::Csv => "text/csv",
        }
    }
}

/// What to export, and the verification-only keys the chain is checked with before a head is
/// signed (old keys a rotation dropped).
#[derive(Debug, Clone, Default)]
pub struct ExportRequest {
    pub window: TimeWindow,
    pub format: ExportFormat,
    pub extra_keys: Vec<ed25519_dalek::VerifyingKey>,
}

pub const CSV_HEADER: &str = "id,sequence,type,actor_kind,actor_id,target_kind,target_id,correlation_id,occurred_at,data,actor_token_id";

pub fn csv_field(raw: &str) -> String {
    if raw.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", raw.replace('"', "\"\""))
    } else {
        raw.to_owned()
    }
}

pub fn csv_line(e: &AuditEvent) -> String {
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
pub fn header_line(workspace: Uuid, from: i64, hash: Option<&[u8]>) -> serde_json::Value {
    json!({ "auditExport": {
        "version": 1,
        "workspaceId": workspace,
        "chainFrom": { "sequence": from, "hash": hash.map(to_hex) },
    }})
}

pub fn signed_head_json(h: &SignedHead) -> serde_json::Value {
    json!({ "signedHead": {
        "workspaceId": h.workspace_id,
        "sequence": h.seq,
        "hash": to_hex(&h.hash),
        "signedAtMs": h.seal.signed_at_ms,
        "kid": h.seal.kid,
        "signature": to_hex(&h.seal.signature),
    }})
}

pub fn checkpoint_json(c: &AuditCheckpoint) -> serde_json::Value {
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
pub fn csv_proof_line(kind: &str, seq: i64, proof: &serde_json::Value) -> String {
    format!(",{seq},{kind},,,,,,,{}", csv_field(&proof.to_string()))
}

enum Phase {
    Start,
    Events,
    Proofs,
    Done,
}

/// Where an export stands between two chunks.
struct Exporter {
    services: Arc<Services>,
    workspace_id: Uuid,
    request: ExportRequest,
    phase: Phase,
    /// The last sequence written.
    after: i64,
    /// Where the chain of the export starts (the sequence before its first event).
    from: Option<i64>,
}

impl Exporter {
    fn line(buf: &mut BytesMut, line: &str) {
        buf.put_slice(line.as_bytes());
        buf.put_u8(b'\n');
    }

    /// The next chunk: the CSV header, a page of events, or the proofs; `None` at the end.
    async fn next(&mut self) -> Result<Option<Bytes>, ServiceError> {
        let mut buf = BytesMut::new();
        loop {
            match self.phase {
                Phase::Start => {
                    self.phase = Phase::Events;
                    if self.request.format == ExportFormat::Csv {
                        Self::line(&mut buf, CSV_HEADER);
                        return Ok(Some(buf.freeze()));
                    }
                }
                Phase::Events => {
                    let page = self
                        .services
                        .export_audit_page(self.workspace_id, self.after, self.request.window)
                        .await?;
                    let Some(last) = page.last().and_then(|e| e.sequence) else {
                        self.phase = Phase::Proofs;
                        continue;
                    };
                    if self.from.is_none() {
                        let from = page[0].sequence.unwrap_or(1) - 1;
                        self.from = Some(from);
                        if self.request.format == ExportFormat::Ndjson {
                            let hash = self.services.chain_hash_at(self.workspace_id, from).await?;
                            let header = header_line(self.workspace_id, from, hash.as_deref());
                            Self::line(&mut buf, &header.to_string());
                        }
                    }
                    for event in &page {
                        match self.request.format {
                            ExportFormat::Ndjson => {
                                let json = serde_json::to_string(&EventJson::from(event))
                                    .map_err(|e| ServiceError::Internal(e.to_string()))?;
                                Self::line(&mut buf, &json);
                            }
                            ExportFormat::Csv => Self::line(&mut buf, &csv_line(event)),
                        }
                    }
                    self.after = last;
                    return Ok(Some(buf.freeze()));
                }
                Phase::Proofs => {
                    self.phase = Phase::Done;
                    let Some(from) = self.from else {
                        return Ok(None);
                    };
                    self.write_proofs(&mut buf, from).await?;
                    return Ok(Some(buf.freeze()));
                }
                Phase::Done => return Ok(None),
            }
        }
    }

    async fn write_proofs(&mut self, buf: &mut BytesMut, from: i64) -> Result<(), ServiceError> {
        let (workspace_id, to) = (self.workspace_id, self.after);
        let extra = std::mem::take(&mut self.request.extra_keys);
        let proofs = self
            .services
            .export_proofs(workspace_id, from, to, Utc::now(), extra)
            .await?;
        if let Some(kid) = &proofs.not_signed_kid {
            tracing::warn!(
                workspace = %workspace_id,
                kid = %kid,
                "audit export signed no fresh head: the latest signed head carries a key this \
                 server does not hold; the export carries only the heads signed before"
            );
        } else if !proofs.heads.iter().any(|h| h.seq == to) {
            tracing::error!(
                workspace = %workspace_id,
                sequence = to,
                "audit export signed no head at its last event: the chain did not verify, so \
                 the export's tail is unproven (verify the workspace's log)"
            );
        }
        let csv = self.request.format == ExportFormat::Csv;
        for c in &proofs.checkpoints {
            let line = checkpoint_json(c);
            match csv {
                false => Self::line(buf, &line.to_string()),
                true => Self::line(buf, &csv_proof_line("audit.checkpoint", c.last_seq, &line)),
            }
        }
        for h in &proofs.heads {
            let line = signed_head_json(h);
            match csv {
                false => Self::line(buf, &line.to_string()),
                true => Self::line(buf, &csv_proof_line("audit.signed_head", h.seq, &line)),
            }
        }
        Ok(())
    }
}

impl Services {
    /// The export of a workspace the caller may read (checked before): a stream of chunks, one
    /// page of events each, then the proofs. A failure ends the stream with the error (the
    /// response is cut short, so a client never takes a partial export for a whole one).
    pub(super) fn audit_export_stream(
        self: &Arc<Self>,
        workspace_id: Uuid,
        request: ExportRequest,
    ) -> impl Stream<Item = Result<Bytes, ServiceError>> + Send + 'static {
        let exporter = Exporter {
            services: self.clone(),
            workspace_id,
            request,
            phase: Phase::Start,
            after: 0,
            from: None,
        };
        futures_util::stream::try_unfold(exporter, |mut exporter| async move {
            Ok(exporter.next().await?.map(|chunk| (chunk, exporter)))
        })
    }
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
