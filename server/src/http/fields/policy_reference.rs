//! A policy version named in a request body: `NAME@VERSION`, as cpctl and every answer's
//! `reference` write it.

use std::borrow::Cow;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
use poem_openapi::types::Type;
use serde_json::Value;

use super::{Invalid, JsonValue, string, value_type};
use crate::service::is_policy_name;

/// A name as installs take it, `@`, and 1 to 9 digits: every such value parses (an i32), and
/// names a version or nothing (a 404).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyReference {
    name: String,
    version: String,
}

impl PolicyReference {
    /// `POLICY_NAME_PATTERN`, then `@` and the version. The document states it as written.
    pub const PATTERN: &'static str = "^[A-Za-z0-9._-]{1,100}@[0-9]{1,9}$";

    pub fn parse(raw: &str) -> Result<Self, String> {
        let refused = || "must be NAME@VERSION: a policy name, `@`, and 1 to 9 digits".to_owned();
        let (name, version) = raw.split_once('@').ok_or_else(refused)?;
        let digits =
            (1..=9).contains(&version.len()) && version.bytes().all(|b| b.is_ascii_digit());
        if !is_policy_name(name) || !digits {
            return Err(refused());
        }
        Ok(Self {
            name: name.to_owned(),
            version: version.to_owned(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn version(&self) -> &str {
        &self.version
    }
}

value_type!(
    PolicyReference,
    "PolicyReference",
    String::schema_ref().merge(MetaSchema {
        pattern: Some(PolicyReference::PATTERN.to_owned()),
        ..MetaSchema::ANY
    })
);

impl JsonValue for PolicyReference {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        Self::parse(string(value)?).map_err(Invalid::Rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::POLICY_NAME_PATTERN;

    #[test]
    fn a_reference_is_a_policy_name_and_digits() {
        // The name part is the install's own rule.
        let name = POLICY_NAME_PATTERN.trim_end_matches('$');
        assert_eq!(PolicyReference::PATTERN, format!("{name}@[0-9]{{1,9}}$"));
        let parsed = PolicyReference::parse("std.v2@12").expect("a reference");
        assert_eq!((parsed.name(), parsed.version()), ("std.v2", "12"));
        assert!(PolicyReference::parse("std@999999999").is_ok());
        for refused in [
            "std",
            "@1",
            "std@",
            "std@+1",
            "std@1234567890",
            "a@b@1",
            "s d@1",
        ] {
            assert!(PolicyReference::parse(refused).is_err(), "{refused}");
        }
    }
}
