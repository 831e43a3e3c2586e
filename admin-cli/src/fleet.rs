//! The `--since` and `--state` arguments `cpctl deliveries` (and `policies decisions`) share.
//! A pool's runners are `runners.rs`'s.

use std::str::FromStr;

use chrono::{DateTime, Utc};

use control_plane::domain::{DeliveryStatus, Span, Timestamp};

/// `--since`: an RFC 3339 time, or a length of time ago (`24h`, `7d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    At(Timestamp),
    Ago(Span),
}

impl Since {
    pub fn at(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Since::At(at) => at.get(),
            Since::Ago(span) => now - span.duration(),
        }
    }
}

impl FromStr for Since {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        if let Ok(at) = Timestamp::parse(raw) {
            return Ok(Since::At(at));
        }
        raw.parse::<Span>().map(Since::Ago).map_err(|_| {
            format!(
                "`{raw}` is neither an RFC 3339 time nor a length of time ago such as 24h or 7d"
            )
        })
    }
}

pub fn delivery_state(raw: &str) -> Result<DeliveryStatus, String> {
    DeliveryStatus::parse(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_a_time_or_a_span_ago() {
        let now = Utc::now();
        let ago: Since = "24h".parse().unwrap();
        assert_eq!(ago.at(now), now - chrono::Duration::hours(24));
        let at: Since = "2026-11-01T10:00:00+01:00".parse().unwrap();
        assert_eq!(at.at(now).to_rfc3339(), "2026-11-01T09:00:00+00:00");
        assert!("yesterday".parse::<Since>().is_err());
    }
}
