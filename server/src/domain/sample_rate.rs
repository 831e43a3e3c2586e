//! A sampling rate: the fraction, from 0 to 1, of routine events kept (`0.01` keeps one in a
//! hundred, `1` all of them, `0` none).

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct SampleRate(f64);

impl SampleRate {
    pub const ALL: SampleRate = SampleRate(1.0);
    pub const NONE: SampleRate = SampleRate(0.0);

    pub fn new(fraction: f64) -> Result<Self, String> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(format!("`{fraction}` is not a fraction between 0 and 1"));
        }
        Ok(Self(fraction))
    }

    pub fn fraction(self) -> f64 {
        self.0
    }

    /// Whether one more event is kept: always at 1, never at 0, otherwise at random.
    pub fn keeps(self) -> bool {
        // `random` is in [0, 1): every draw is below 1 and none below 0.
        rand::random::<f64>() < self.0
    }
}

impl FromStr for SampleRate {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let fraction: f64 = raw
            .trim()
            .parse()
            .map_err(|_| format!("`{raw}` is not a fraction between 0 and 1, such as 0.01"))?;
        // NaN fails the range check too.
        Self::new(fraction).map_err(|_| format!("`{raw}` is not a fraction between 0 and 1"))
    }
}

impl fmt::Display for SampleRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fractions_and_refuses_the_rest() {
        assert_eq!("0.25".parse::<SampleRate>().unwrap().fraction(), 0.25);
        assert_eq!("1".parse::<SampleRate>().unwrap(), SampleRate::ALL);
        assert_eq!("0".parse::<SampleRate>().unwrap(), SampleRate::NONE);
        for bad in ["-0.1", "1.5", "NaN", "half", ""] {
            assert!(bad.parse::<SampleRate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_ends_keep_all_or_nothing() {
        assert!((0..1000).all(|_| SampleRate::ALL.keeps()));
        assert!((0..1000).all(|_| !SampleRate::NONE.keeps()));
    }
}
