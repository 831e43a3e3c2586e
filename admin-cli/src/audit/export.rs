//! `cpctl audit export`: the server's stream written to stdout chunk by chunk as it arrives
//! (never the whole body in memory), with a progress line on stderr every so many events and
//! a warning when the export ends with no signed head at its last event.

use std::io::Write;

use anyhow::Context;

use super::ExportFormat;

/// Follows the lines going by, for progress and the closing check; holds at most one line.
struct Watch {
    format: ExportFormat,
    partial: Vec<u8>,
    lines: u64,
    events: u64,
    last_event: Option<i64>,
    signed: Vec<i64>,
    progress_every: u64,
}

impl Watch {
    fn feed(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            self.partial.extend_from_slice(&rest[..end]);
            let line = std::mem::take(&mut self.partial);
            self.line(&line);
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
    }

    fn line(&mut self, line: &[u8]) {
        self.lines += 1;
        let text = String::from_utf8_lossy(line);
        let seq = match self.format {
            ExportFormat::Ndjson => {
                if text.starts_with("{\"auditExport\"") || text.starts_with("{\"checkpoint\"") {
                    return;
                }
                if text.starts_with("{\"signedHead\"") {
                    let head: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                    if let Some(seq) = head["signedHead"]["sequence"].as_i64() {
                        self.signed.push(seq);
                    }
                    return;
                }
                let event: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                event["sequence"].as_i64()
            }
            ExportFormat::Csv => {
                if self.lines == 1 {
                    return;
                }
                let seq = text.split(',').nth(1).and_then(|s| s.parse::<i64>().ok());
                if text.starts_with(",") {
                    if text.contains(",audit.signed_head,") {
                        self.signed.extend(seq);
                    }
                    return;
                }
                seq
            }
        };
        self.events += 1;
        self.last_event = seq.or(self.last_event);
        if self.events.is_multiple_of(self.progress_every) {
            eprintln!(
                "exported {} events (up to sequence {})",
                self.events,
                self.last_event.unwrap_or_default()
            );
        }
    }
}

pub async fn write(
    mut response: reqwest::Response,
    format: ExportFormat,
    progress_every: u64,
) -> anyhow::Result<()> {
    let mut watch = Watch {
        format,
        partial: Vec::new(),
        lines: 0,
        events: 0,
        last_event: None,
        signed: Vec::new(),
        progress_every,
    };
    while let Some(chunk) = response
        .chunk()
        .await
        .context("the export was cut short (the server stopped it, or the connection broke)")?
    {
        // No lock held across the await; each chunk goes out whole, then is flushed.
        let mut w = std::io::stdout().lock();
        w.write_all(&chunk)?;
        w.flush()?;
        drop(w);
        watch.feed(&chunk);
    }
    if let Some(last) = watch.last_event
        && !watch.signed.contains(&last)
    {
        eprintln!(
            "warning: no signed head at sequence {last}: the chain did not verify on the \
             server, or the server does not hold the key of its latest signed head, so this \
             export's tail is unproven (run cpctl audit verify)"
        );
    }
    if watch.events >= progress_every {
        eprintln!("exported {} events in all", watch.events);
    }
    Ok(())
}
