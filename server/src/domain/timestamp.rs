//! An instant as the API writes it, in every response body, stream event and event `data`:
//! RFC 3339, UTC with `Z`, exactly six fraction digits (`2026-01-02T03:04:05.000000Z`).
//! One fixed width lets clients compare times as strings and parse them with one pattern.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The only shape a written time takes; the OpenAPI document states it as the `pattern`.
pub const TIMESTAMP_PATTERN: &str = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

impl Timestamp {
    /// Drops anything below a microsecond, which the stores do not keep either.
    pub fn new(at: DateTime<Utc>) -> Self {
        Self(DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap_or(at))
    }

    /// Reads any RFC 3339 time (any offset, any fraction), normalised to UTC.
    pub fn parse(raw: &str) -> Result<Self, chrono::ParseError> {
        DateTime::parse_from_rfc3339(raw).map(|at| Self::new(at.with_timezone(&Utc)))
    }

    pub fn get(self) -> DateTime<Utc> {
        self.0
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(at: DateTime<Utc>) -> Self {
        Self::new(at)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `use_z` writes `Z` rather than `+00:00`; `Micros` always writes six digits.
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Micros, true))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Reads any RFC 3339 time, as [`Timestamp::parse`] (webhook payloads a runner receives).
impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(raw: &str) -> String {
        Timestamp::parse(raw).unwrap().to_string()
    }

    #[test]
    fn always_utc_z_with_six_digits() {
        assert_eq!(
            written("2026-01-02T03:04:05Z"),
            "2026-01-02T03:04:05.000000Z"
        );
        assert_eq!(
            written("2026-01-02T03:04:05.1+00:00"),
            "2026-01-02T03:04:05.100000Z"
        );
        assert_eq!(
            written("2026-01-02T05:04:05.123456789+02:00"),
            "2026-01-02T03:04:05.123456Z"
        );
    }

    #[test]
    fn serialises_as_the_display_string() {
        let at = Timestamp::parse("2026-01-02T03:04:05.5Z").unwrap();
        assert_eq!(
            serde_json::to_value(at).unwrap(),
            "2026-01-02T03:04:05.500000Z"
        );
    }
}
