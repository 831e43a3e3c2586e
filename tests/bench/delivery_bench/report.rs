//! What the bench reports: one `Row` per measurement (printed as a Markdown table row by
//! `run`), the percentile and millisecond helpers for its latencies, and the `phase` marks on
//! stderr that line up samples taken outside (`pg_stat_activity`) with what was running.

use std::time::Duration;

/// Marks a phase's start on stderr with the wall clock, to line up samples taken outside
/// (`pg_stat_activity`) with what was running.
pub(super) fn phase(name: &str) {
    eprintln!(
        "phase {name} at {}",
        chrono::Utc::now().format("%H:%M:%S%.3f")
    );
}

pub(super) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub(super) fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

pub(super) struct Row {
    pub(super) measure: String,
    pub(super) count: usize,
    pub(super) per_second: f64,
    pub(super) latency: Option<(Duration, Duration)>,
}
