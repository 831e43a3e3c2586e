//! The values only responses hold: the states of commands, deliveries, revisions and reviews,
//! and times. Written from the domain's enums and `Timestamp`, so the document's pattern lists
//! exactly what the server writes; their readers exist only because `#[derive(Object)]` asks.

use std::borrow::Cow;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
use serde_json::{Value, json};

use super::value_type;
use crate::domain::{
    CommandStatus, DeliveryStatus, ReviewStatus, RevisionState, TIMESTAMP_PATTERN, Timestamp,
};

/// `^(a|b|…)$`: how the document has always stated a response's state.
fn pattern_of(values: impl Iterator<Item = &'static str>) -> String {
    format!("^({})$", values.collect::<Vec<_>>().join("|"))
}

/// Response states, written from the domain's enums; the pattern lists the enum's values.
macro_rules! state_type {
    ($($ty:ident),+) => {$(
        value_type!(
            $ty,
            stringify!($ty),
            String::schema_ref().merge(MetaSchema {
                pattern: Some(pattern_of($ty::ALL.iter().map(|s| s.as_str()))),
                ..MetaSchema::ANY
            })
        );

        impl ToJSON for $ty {
            fn to_json(&self) -> Option<Value> {
                Some(json!(self.as_str()))
            }
        }

        // Only because `#[derive(Object)]` derives a reader too; responses are never read.
        impl ParseFromJSON for $ty {
            fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
                let value = value.unwrap_or_default();
                match value.as_str().map($ty::parse) {
                    Some(Ok(state)) => Ok(state),
                    Some(Err(reason)) => Err(ParseError::custom(reason)),
                    None => Err(ParseError::expected_type(value)),
                }
            }
        }
    )+};
}

state_type!(CommandStatus, DeliveryStatus, RevisionState, ReviewStatus);

// A response time: `date-time`, with the pattern stating the one shape the server writes.
value_type!(
    Timestamp,
    "Timestamp",
    MetaSchemaRef::Inline(Box::new(MetaSchema {
        pattern: Some(TIMESTAMP_PATTERN.to_owned()),
        ..MetaSchema::new_with_format("string", "date-time")
    }))
);

impl ToJSON for Timestamp {
    fn to_json(&self) -> Option<Value> {
        Some(Value::String(self.to_string()))
    }
}

// Only because `#[derive(Object)]` derives a reader too; responses are never read.
impl ParseFromJSON for Timestamp {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        let value = value.unwrap_or_default();
        match value.as_str().map(Timestamp::parse) {
            Some(Ok(at)) => Ok(at),
            Some(Err(e)) => Err(ParseError::custom(e)),
            None => Err(ParseError::expected_type(value)),
        }
    }
}
