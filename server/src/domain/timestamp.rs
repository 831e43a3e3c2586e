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

impl Timestamp {
    /// Hands the written form to `use_it`. Digit by digit into a stack buffer: an activity page
    /// writes 50 of these, and chrono's formatter (an allocation, then `fmt` machinery) was 2%
    /// of the server's CPU there. Chrono writes what this does not: a year outside 0000–9999.
    fn written<R>(self, use_it: impl FnOnce(&str) -> R) -> R {
        use chrono::{Datelike, Timelike};
        let (date, time) = (self.0.date_naive(), self.0.time());
        let micros = time.nanosecond() / 1_000;
        let year = u32::try_from(date.year()).ok().filter(|y| *y <= 9999);
        let Some(year) = year.filter(|_| micros < 1_000_000) else {
            // `use_z` writes `Z` rather than `+00:00`; `Micros` always writes six digits.
            return use_it(&self.0.to_rfc3339_opts(SecondsFormat::Micros, true));
        };
        let mut buf = *b"0000-00-00T00:00:00.000000Z";
        let fields = [
            (year, 0..4),
            (date.month(), 5..7),
            (date.day(), 8..10),
            (time.hour(), 11..13),
            (time.minute(), 14..16),
            (time.second(), 17..19),
            (micros, 20..26),
        ];
        for (mut value, digits) in fields {
            for at in digits.rev() {
                buf[at] = b'0' + (value % 10) as u8;
                value /= 10;
            }
        }
        use_it(std::str::from_utf8(&buf).expect("ASCII digits and separators"))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.written(|s| f.write_str(s))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.written(|s| serializer.serialize_str(s))
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

    /// The digit writer against chrono's RFC 3339 writer, over the edges of every field and
    /// a spread of instants from year 0 to 9999, and chrono's own form past them.
    #[test]
    fn writes_what_chrono_writes() {
        let chrono_form = |at: DateTime<Utc>| at.to_rfc3339_opts(SecondsFormat::Micros, true);
        let mut instants = vec![
            "0000-01-01T00:00:00Z",
            "1970-01-01T00:00:00Z",
            "1999-12-31T23:59:59.999999Z",
            "2026-02-28T09:08:07.000001Z",
            "2028-02-29T12:00:00.5Z",
            "9999-12-31T23:59:59.999999Z",
        ]
        .into_iter()
        .map(|raw| Timestamp::parse(raw).unwrap().get())
        .collect::<Vec<_>>();
        let (first, last) = (
            instants[0].timestamp_micros(),
            instants[5].timestamp_micros(),
        );
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let micros = first + (x % (last - first) as u64) as i64;
            instants.push(DateTime::from_timestamp_micros(micros).unwrap());
        }
        for at in instants {
            assert_eq!(Timestamp::new(at).to_string(), chrono_form(at));
        }
        for year in [10_000, -1] {
            let day = chrono::NaiveDate::from_ymd_opt(year, 12, 31).unwrap();
            let at = day.and_hms_micro_opt(23, 59, 59, 7).unwrap().and_utc();
            assert_eq!(Timestamp::new(at).to_string(), chrono_form(at));
        }
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
