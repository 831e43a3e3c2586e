//! `overlapHours`: how long a replaced runner webhook secret keeps signing beside the new one.

use std::borrow::Cow;
use std::time::Duration;

use poem_openapi::registry::MetaSchemaRef;
use poem_openapi::types::{ToJSON, Type};
use serde_json::{Value, json};

use super::{Invalid, JsonValue, integer, range_schema, value_type};
use crate::service::MAX_SECRET_OVERLAP;

/// Whole hours, 0 to [`OverlapHours::MAX`]; only [`OverlapHours::new`] makes one, so a value
/// is always within the bounds its schema states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverlapHours(u32);

impl OverlapHours {
    /// The service's longest overlap, in hours.
    pub const MAX: i64 = (MAX_SECRET_OVERLAP.as_secs() / 3600) as i64;
    /// When the body does not say.
    pub const DEFAULT: u32 = 24;

    pub fn new(hours: i64) -> Result<Self, String> {
        match u32::try_from(hours) {
            Ok(h) if i64::from(h) <= Self::MAX => Ok(Self(h)),
            _ => Err(format!("must be an integer from 0 to {}", Self::MAX)),
        }
    }

    pub fn duration(self) -> Duration {
        Duration::from_secs(u64::from(self.0) * 3600)
    }
}

impl Default for OverlapHours {
    fn default() -> Self {
        Self(Self::DEFAULT)
    }
}

value_type!(
    OverlapHours,
    "OverlapHours",
    range_schema(0, OverlapHours::MAX)
);

impl JsonValue for OverlapHours {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        Self::new(integer(value)?).map_err(Invalid::Rule)
    }
}

/// The document's `default`.
impl ToJSON for OverlapHours {
    fn to_json(&self) -> Option<Value> {
        Some(json!(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_documented_range_makes_one() {
        assert_eq!(OverlapHours::MAX, 720);
        assert_eq!(
            OverlapHours::new(0).map(OverlapHours::duration),
            Ok(Duration::ZERO)
        );
        assert_eq!(
            OverlapHours::new(720).map(OverlapHours::duration),
            Ok(MAX_SECRET_OVERLAP)
        );
        assert!(OverlapHours::new(721).is_err());
        assert!(OverlapHours::new(-1).is_err());
        assert!(OverlapHours::new(i64::from(u32::MAX) + 1).is_err());
        let schema = serde_json::to_value(OverlapHours::schema_ref()).expect("schema");
        assert_eq!(schema["minimum"], json!(0.0));
        assert_eq!(schema["maximum"], json!(720.0));
        assert_eq!(OverlapHours::default().to_json(), Some(json!(24)));
    }
}
