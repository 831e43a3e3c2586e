//! A length of time as an administrator types it: a whole number and one unit, `s`, `m`, `h`,
//! `d` or `w` (`90s`, `15m`, `24h`, `7d`, `2w`). One shape for every `--grace`, `--since`-ago,
//! `--expiring-within` and `--unused-for`, so no command invents its own.

use std::fmt;
use std::str::FromStr;

use chrono::Duration;

/// At most ten years: longer is a typo, and it keeps every `now ± span` representable.
const MAX_SECONDS: i64 = 10 * 366 * 24 * 3600;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span(i64);

impl Span {
    pub fn from_seconds(seconds: i64) -> Result<Self, String> {
        if !(0..=MAX_SECONDS).contains(&seconds) {
            return Err(format!("must be between 0s and {}d", MAX_SECONDS / 86_400));
        }
        Ok(Self(seconds))
    }

    pub fn seconds(self) -> i64 {
        self.0
    }

    pub fn duration(self) -> Duration {
        Duration::seconds(self.0)
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl FromStr for Span {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "`{raw}` is not a length of time: write a number and s, m, h, d or w, such as 24h or 7d"
            )
        };
        let split = raw.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (number, unit) = raw.split_at(split);
        let number: i64 = number.parse().map_err(|_| bad())?;
        let unit = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            "w" => 7 * 86_400,
            _ => return Err(bad()),
        };
        let seconds = number.checked_mul(unit).ok_or_else(bad)?;
        Self::from_seconds(seconds).map_err(|e| format!("`{raw}` {e}"))
    }
}

impl fmt::Display for Span {
    /// The largest unit that divides it exactly, so `86400s` shows as `1d`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [(7 * 86_400, "w"), (86_400, "d"), (3600, "h"), (60, "m")];
        for (size, unit) in units {
            if self.0 != 0 && self.0 % size == 0 {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}s", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_unit_and_writes_the_largest_exact_one() {
        for (raw, seconds, shown) in [
            ("90s", 90, "90s"),
            ("15m", 900, "15m"),
            ("24h", 86_400, "1d"),
            ("7d", 604_800, "1w"),
            ("2w", 1_209_600, "2w"),
            ("0s", 0, "0s"),
        ] {
            let span: Span = raw.parse().unwrap();
            assert_eq!(span.seconds(), seconds, "{raw}");
            assert_eq!(span.to_string(), shown, "{raw}");
        }
    }

    #[test]
    fn refuses_what_is_not_one_number_and_one_unit() {
        for raw in [
            "",
            "7",
            "d",
            "7 d",
            "-7d",
            "7days",
            "1.5h",
            "7D",
            "99999999999999w",
            "5000w",
        ] {
            let err = raw.parse::<Span>().unwrap_err();
            assert!(err.contains(raw) || raw.is_empty(), "{raw}: {err}");
        }
    }
}
