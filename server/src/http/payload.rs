//! `JsonBody<T>`: a JSON request body parsed into a domain type with field-level errors.
//!
//! poem-openapi's `Json<T>` reports failures as one opaque string; clients need to know which
//! field failed and why. `T::Body` documents the body and reads it; `T::from_body` turns it
//! into the handler's input.

use poem::{Request, RequestBody};
use poem_openapi::impl_apirequest_for_payload;
use poem_openapi::payload::{ParsePayload, Payload};
use poem_openapi::registry::{MetaSchemaRef, Registry};
use poem_openapi::types::Type;
use serde_json::{Map, Value, json};
use sha2::Digest;

use super::context::BodyLimit;
use super::error::ApiFailure;
use super::fields::JsonField;
use crate::domain::{FieldError, ValidationErrors};

/// A request body: read from JSON with every field's error, and documented. Declared with
/// [`request_body!`](super::fields::request_body), which derives both from one list.
pub trait DeclaredBody: Type + Sized {
    fn from_json(value: Value) -> Result<Self, ValidationErrors>;
}

/// What a handler takes from a request body: its declared `Body`, turned into a domain or
/// service input.
pub trait FromJson: Sized {
    type Body: DeclaredBody;

    fn from_body(body: Self::Body) -> Result<Self, ValidationErrors>;

    fn from_json(value: Value) -> Result<Self, ValidationErrors> {
        Self::from_body(Self::Body::from_json(value)?)
    }
}

pub struct JsonBody<T> {
    pub value: T,
    /// SHA-256 of the body re-serialised with sorted keys: equal for equal requests however the
    /// client ordered or spaced them (the idempotency fingerprint).
    pub digest: [u8; 32],
    /// SHA-256 of the body exactly as received (what a runner signs).
    pub raw_digest: [u8; 32],
}

impl<T: FromJson + Send> Payload for JsonBody<T> {
    const CONTENT_TYPE: &'static str = "application/json; charset=utf-8";

    fn check_content_type(content_type: &str) -> bool {
        // The contract says application/json; parameters such as charset are fine.
        content_type.parse::<mime::Mime>().is_ok_and(|m| {
            m.type_() == mime::APPLICATION && m.subtype() == mime::JSON && m.suffix().is_none()
        })
    }

    fn schema_ref() -> MetaSchemaRef {
        T::Body::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::Body::register(registry);
    }
}

impl<T: FromJson + Send> ParsePayload for JsonBody<T> {
    const IS_REQUIRED: bool = true;

    async fn from_request(request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        let limit = request.data::<BodyLimit>().map_or(1024 * 1024, |l| l.0);
        let bytes = body
            .take()
            .map_err(|_| ApiFailure::internal())?
            .into_bytes_limit(limit)
            .await
            .map_err(|e| match e {
                poem::error::ReadBodyError::PayloadTooLarge => ApiFailure::payload_too_large(limit),
                _ => ApiFailure::new(
                    poem::http::StatusCode::BAD_REQUEST,
                    "invalid_body",
                    "the request body could not be read",
                ),
            })?;
        if bytes.is_empty() {
            return Err(ApiFailure::validation(
                &FieldError::new("body", "a JSON object is required").into(),
            )
            .into());
        }
        let TopLevel { value, duplicate } = serde_json::from_slice(&bytes).map_err(|e| {
            ApiFailure::new(
                poem::http::StatusCode::BAD_REQUEST,
                "invalid_json",
                "the request body is not valid JSON",
            )
            .with_details(
                json!({ "line": e.line(), "column": e.column(), "reason": e.to_string() }),
            )
        })?;
        if let Some(key) = duplicate {
            // Last-wins would hide from us what a proxy reading the first value saw.
            let error = FieldError::new(key, "appears more than once");
            return Err(ApiFailure::validation(&error.into()).into());
        }
        let digest = sha2::Sha256::digest(serde_json::to_vec(&value).unwrap_or_default()).into();
        let raw_digest = sha2::Sha256::digest(&bytes).into();
        T::from_json(value)
            .map(|value| JsonBody {
                value,
                digest,
                raw_digest,
            })
            .map_err(|errors| ApiFailure::validation(&errors).into())
    }
}

impl_apirequest_for_payload!(JsonBody<T>, T: FromJson + Send);

/// A parsed body, and the first top-level key that appeared twice, if any.
struct TopLevel {
    value: Value,
    duplicate: Option<String>,
}

impl<'de> serde::Deserialize<'de> for TopLevel {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TopLevelVisitor)
    }
}

struct TopLevelVisitor;

impl TopLevelVisitor {
    fn other(value: Value) -> TopLevel {
        TopLevel {
            value,
            duplicate: None,
        }
    }
}

impl<'de> serde::de::Visitor<'de> for TopLevelVisitor {
    type Value = TopLevel;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<TopLevel, A::Error> {
        let mut fields = Map::new();
        let mut duplicate = None;
        while let Some((key, value)) = map.next_entry::<String, Value>()? {
            if duplicate.is_none() && fields.contains_key(&key) {
                duplicate = Some(key.clone());
            }
            fields.insert(key, value);
        }
        Ok(TopLevel {
            value: Value::Object(fields),
            duplicate,
        })
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<TopLevel, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Self::other(Value::Array(items)))
    }

    fn visit_bool<E>(self, v: bool) -> Result<TopLevel, E> {
        Ok(Self::other(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<TopLevel, E> {
        Ok(Self::other(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<TopLevel, E> {
        Ok(Self::other(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<TopLevel, E> {
        Ok(Self::other(Value::from(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<TopLevel, E> {
        Ok(Self::other(Value::String(v.to_owned())))
    }

    fn visit_unit<E>(self) -> Result<TopLevel, E> {
        Ok(Self::other(Value::Null))
    }
}

/// Reads the fields of one JSON object, recording every error, then rejects unknown fields.
pub struct JsonObject {
    fields: Map<String, Value>,
    errors: ValidationErrors,
}

impl JsonObject {
    pub fn new(value: Value) -> Result<Self, ValidationErrors> {
        match value {
            Value::Object(fields) => Ok(Self {
                fields,
                errors: ValidationErrors::default(),
            }),
            _ => Err(FieldError::new("body", "must be a JSON object").into()),
        }
    }

    fn take(&mut self, field: &str, required: bool) -> Option<Value> {
        match self.fields.remove(field) {
            Some(value) => Some(value),
            None if required => {
                self.errors.push(FieldError::new(field, "is required"));
                None
            }
            None => None,
        }
    }

    /// A property read as `T`; `None` when absent or invalid (the error is recorded).
    pub fn field<T: JsonField>(&mut self, field: &str, required: bool) -> Option<T> {
        let value = self.take(field, required)?;
        T::read(field, value, &mut self.errors)
    }

    /// Fails on any field not read, then on any error recorded.
    pub fn finish(mut self) -> Result<(), ValidationErrors> {
        let mut unknown: Vec<String> = self.fields.keys().cloned().collect();
        unknown.sort();
        for field in unknown {
            self.errors
                .push(FieldError::new(field, "is not an allowed property"));
        }
        self.errors.into_result()
    }
}
