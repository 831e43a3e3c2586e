//! The values of request and response bodies as the OpenAPI document describes them. Each
//! type's schema is built from the same constants (and enum lists) as its parser, so the
//! document cannot state a bound the server does not enforce, or the reverse.
//!
//! Request bodies are declared with [`request_body!`]: one list of properties gives the
//! struct, its reader (every field's errors, in order, then unknown properties) and its schema.
//!
//! Here: the request values and their readers. `responses.rs`: the values only responses hold
//! (states, times). `body.rs`: the `request_body!` declaration. The bounds the readers apply
//! are the domain's (`domain/bounds.rs`).

mod body;
mod overlap;
mod policy_reference;
mod responses;

pub(crate) use body::request_body;
pub use body::{description, property};
pub use overlap::OverlapHours;
pub use policy_reference::PolicyReference;

use std::borrow::Cow;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef, Registry};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::domain::{
    DeliveryStatus, Email, ExpiresInDays, FieldError, MIN_TEXT_CHARS, NO_NUL_PATTERN, ReportReason,
    RevocationReason, Role, Scope, Span, TokenName, ValidationErrors, bounded_arg, bounded_text,
    item_count, parse_uuid,
};
use crate::policy::{Instances, PolicyKind};
use crate::service::{
    DeliveryStatusInput, MAX_ROTATION_GRACE_DAYS, ReviewInput, SubmitCommandInput,
};

/// Why a JSON value was refused.
pub enum Invalid {
    /// Not the JSON type the schema says, such as "must be a string".
    Type(&'static str),
    /// The right JSON type, outside the rule.
    Rule(String),
}

/// A value of one property (or array item) of a request body.
pub trait JsonValue: Type + Sized {
    fn parse(value: &Value) -> Result<Self, Invalid>;
}

/// How a property is read: a single value, or an array whose items fail one by one.
pub trait JsonField: Type + Sized {
    /// Reads a present value, recording what fails against `field`.
    fn read(field: &str, value: Value, errors: &mut ValidationErrors) -> Option<Self>;
}

impl<T: JsonValue> JsonField for T {
    fn read(field: &str, value: Value, errors: &mut ValidationErrors) -> Option<Self> {
        let result = T::parse(&value).map_err(|invalid| match invalid {
            Invalid::Type(reason) => FieldError::new(field, reason).with_value(value.clone()),
            // A refused string is not echoed back (it may be long); a refused number is.
            Invalid::Rule(reason) if value.is_string() => FieldError::new(field, reason),
            Invalid::Rule(reason) => FieldError::new(field, reason).with_value(value.clone()),
        });
        errors.collect(result)
    }
}

fn string(value: &Value) -> Result<&str, Invalid> {
    value.as_str().ok_or(Invalid::Type("must be a string"))
}

/// A JSON number without a fraction.
fn integer(value: &Value) -> Result<i64, Invalid> {
    let number = match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                .map(|f| f as i64)
        }),
        _ => None,
    };
    number.ok_or(Invalid::Type("must be an integer"))
}

/// `string` of `MIN_TEXT_CHARS` to `max` characters without U+0000: `bounded_text`, which
/// the text newtypes use too.
fn text_schema(max: usize) -> MetaSchemaRef {
    String::schema_ref().merge(MetaSchema {
        min_length: Some(MIN_TEXT_CHARS),
        max_length: Some(max),
        pattern: Some(NO_NUL_PATTERN.to_owned()),
        ..MetaSchema::ANY
    })
}

/// `integer` (int64) from `min` to `max`.
fn range_schema(min: i64, max: i64) -> MetaSchemaRef {
    i64::schema_ref().merge(MetaSchema {
        minimum: Some(min as f64),
        maximum: Some(max as f64),
        ..MetaSchema::ANY
    })
}

/// A named `string` enum schema listing `values`.
fn register_enum<T: Type>(
    registry: &mut Registry,
    description: Option<&'static str>,
    values: impl Iterator<Item = &'static str>,
) {
    registry.create_schema::<T, _>(T::name().into_owned(), |_| MetaSchema {
        description,
        enum_items: values.map(|v| json!(v)).collect(),
        ..MetaSchema::new("string")
    });
}

/// The `Type` boilerplate of a single value with the given schema name and schema.
macro_rules! value_type {
    ($ty:ty, $name:expr, $schema:expr $(, register = $register:expr)?) => {
        impl Type for $ty {
            const IS_REQUIRED: bool = true;
            type RawValueType = Self;
            type RawElementValueType = Self;

            fn name() -> Cow<'static, str> {
                Cow::from($name)
            }

            fn schema_ref() -> MetaSchemaRef {
                $schema
            }

            $(
                fn register(registry: &mut Registry) {
                    ($register)(registry)
                }
            )?

            fn as_raw_value(&self) -> Option<&Self> {
                Some(self)
            }

            fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
                Box::new(self.as_raw_value().into_iter())
            }
        }
    };
}

use value_type;

impl JsonValue for Uuid {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        parse_uuid(string(value)?).ok_or_else(|| Invalid::Rule("must be a uuid".into()))
    }
}

impl JsonValue for bool {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        value.as_bool().ok_or(Invalid::Type("must be a boolean"))
    }
}

impl JsonValue for i32 {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        i32::try_from(integer(value)?).map_err(|_| Invalid::Rule("must be a 32-bit integer".into()))
    }
}

/// Free text of 1 to `MAX` characters without NUL (`bounded_text`).
pub struct Text<const MAX: usize>(pub String);

impl<const MAX: usize> Type for Text<MAX> {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        format!("text_{MAX}").into()
    }

    fn schema_ref() -> MetaSchemaRef {
        text_schema(MAX)
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl<const MAX: usize> JsonValue for Text<MAX> {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        bounded_text(string(value)?, MAX)
            .map(Self)
            .map_err(Invalid::Rule)
    }
}

value_type!(TokenName, "TokenName", text_schema(TokenName::MAX_CHARS));

impl JsonValue for TokenName {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        TokenName::parse(string(value)?).map_err(Invalid::Rule)
    }
}

value_type!(
    RevocationReason,
    "RevocationReason",
    text_schema(RevocationReason::MAX_CHARS)
);

impl JsonValue for RevocationReason {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        RevocationReason::parse(string(value)?).map_err(Invalid::Rule)
    }
}

value_type!(
    Email,
    "Email",
    String::schema_ref().merge(MetaSchema {
        min_length: Some(3),
        max_length: Some(Email::MAX_CHARS),
        pattern: Some(Email::PATTERN.to_owned()),
        ..MetaSchema::ANY
    })
);

impl JsonValue for Email {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        Email::parse(string(value)?).map_err(|e| Invalid::Rule(e.to_string()))
    }
}

value_type!(
    ExpiresInDays,
    "ExpiresInDays",
    range_schema(ExpiresInDays::MIN, ExpiresInDays::MAX)
);

impl JsonValue for ExpiresInDays {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        ExpiresInDays::parse(integer(value)?).map_err(Invalid::Rule)
    }
}

impl ToJSON for ExpiresInDays {
    fn to_json(&self) -> Option<Value> {
        Some(json!(self.days()))
    }
}

/// A rotation's grace in whole seconds, 0 to `MAX_ROTATION_GRACE_DAYS` days (default 0).
#[derive(Default)]
pub struct GraceSeconds(pub Span);

const MAX_GRACE_SECONDS: i64 = MAX_ROTATION_GRACE_DAYS * 86_400;

value_type!(
    GraceSeconds,
    "GraceSeconds",
    range_schema(0, MAX_GRACE_SECONDS)
);

impl JsonValue for GraceSeconds {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        let seconds = integer(value)?;
        if !(0..=MAX_GRACE_SECONDS).contains(&seconds) {
            return Err(Invalid::Rule(format!(
                "must be from 0 to {MAX_GRACE_SECONDS} ({MAX_ROTATION_GRACE_DAYS} days)"
            )));
        }
        Span::from_seconds(seconds).map(Self).map_err(Invalid::Rule)
    }
}

impl ToJSON for GraceSeconds {
    fn to_json(&self) -> Option<Value> {
        Some(json!(self.0.seconds()))
    }
}

/// One argument of a runner command: up to `MAX_ARG` characters without NUL, possibly empty.
pub struct CommandArg(pub String);

value_type!(
    CommandArg,
    "CommandArg",
    String::schema_ref().merge(MetaSchema {
        max_length: Some(SubmitCommandInput::MAX_ARG),
        pattern: Some(NO_NUL_PATTERN.to_owned()),
        ..MetaSchema::ANY
    })
);

impl JsonValue for CommandArg {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        bounded_arg(string(value)?, SubmitCommandInput::MAX_ARG)
            .map(|s| Self(s.to_owned()))
            .map_err(Invalid::Rule)
    }
}

impl ToJSON for CommandArg {
    fn to_json(&self) -> Option<Value> {
        Some(json!(self.0))
    }
}

/// A command's timeout in seconds (`SubmitCommandInput::parse_timeout`).
pub struct TimeoutSeconds(pub i32);

value_type!(
    TimeoutSeconds,
    "TimeoutSeconds",
    range_schema(
        SubmitCommandInput::MIN_TIMEOUT,
        SubmitCommandInput::MAX_TIMEOUT
    )
);

impl JsonValue for TimeoutSeconds {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        SubmitCommandInput::parse_timeout(integer(value)?)
            .map(Self)
            .map_err(Invalid::Rule)
    }
}

impl Default for TimeoutSeconds {
    fn default() -> Self {
        Self(SubmitCommandInput::DEFAULT_TIMEOUT)
    }
}

impl ToJSON for TimeoutSeconds {
    fn to_json(&self) -> Option<Value> {
        Some(json!(i64::from(self.0)))
    }
}

/// A review's rating (`ReviewInput::parse_rating`).
pub struct Rating(pub u8);

value_type!(
    Rating,
    "Rating",
    range_schema(ReviewInput::MIN_RATING, ReviewInput::MAX_RATING)
);

impl JsonValue for Rating {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        ReviewInput::parse_rating(integer(value)?)
            .map(Self)
            .map_err(Invalid::Rule)
    }
}

/// A request enum: a named schema listing `$values`, read by `$parse`.
macro_rules! enum_value {
    ($ty:ty, $name:literal, $description:expr, $values:expr, $parse:expr) => {
        value_type!(
            $ty,
            $name,
            MetaSchemaRef::Reference($name.into()),
            register =
                |registry: &mut Registry| { register_enum::<$ty>(registry, $description, $values) }
        );

        impl JsonValue for $ty {
            fn parse(value: &Value) -> Result<Self, Invalid> {
                ($parse)(string(value)?).map_err(|e| Invalid::Rule(e.to_string()))
            }
        }
    };
}

enum_value!(
    Scope,
    "ScopeName",
    Some("Allowed scope values."),
    Scope::ALL.iter().map(|s| s.as_str()),
    Scope::parse
);

enum_value!(
    Role,
    // The same schema as the one `GET /v1/me` answers with (`me::RoleBody`), so one name.
    "Role",
    Some(
        "A user's role: `member`, `admin` (administers its organisation) or `operator` (the instance)."
    ),
    Role::ALL.iter().map(|r| r.as_str()),
    Role::parse
);

/// A response's role, and the document's `default` of a request's.
impl ToJSON for Role {
    fn to_json(&self) -> Option<Value> {
        Some(json!(self.as_str()))
    }
}

// Only because `#[derive(Object)]` derives a reader too; requests read roles by `JsonValue`.
impl ParseFromJSON for Role {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        let value = value.unwrap_or_default();
        match value.as_str().map(Role::parse) {
            Some(Ok(role)) => Ok(role),
            Some(Err(e)) => Err(ParseError::custom(e)),
            None => Err(ParseError::expected_type(value)),
        }
    }
}

enum_value!(
    ReportReason,
    "ReportReasonName",
    None,
    ReportReason::ALL.iter().map(|r| r.as_str()),
    ReportReason::parse
);

enum_value!(
    PolicyKind,
    "PolicyKind",
    Some("A policy's kind: `authorizer` or `moderator`."),
    PolicyKind::ALL.iter().map(|k| k.as_str()),
    PolicyKind::parse
);

enum_value!(
    Instances,
    "PolicyInstances",
    Some(
        "How a policy version's decisions get their instances: `fresh` (a new one for every \
         decision) or `per-organisation` (warm ones, each serving one organisation)."
    ),
    Instances::ALL.iter().map(|i| i.as_str()),
    Instances::parse
);

/// A response's mode, as a version shows it.
impl ToJSON for Instances {
    fn to_json(&self) -> Option<Value> {
        Some(json!(self.as_str()))
    }
}

// Only because `#[derive(Object)]` derives a reader too; an install reads its query itself.
impl ParseFromJSON for Instances {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        let value = value.unwrap_or_default();
        match value.as_str().map(Instances::parse) {
            Some(Ok(instances)) => Ok(instances),
            Some(Err(e)) => Err(ParseError::custom(e)),
            None => Err(ParseError::expected_type(value)),
        }
    }
}

/// A status a runner may report (`DeliveryStatusInput::REPORTABLE`).
pub struct ReportedStatus(pub DeliveryStatus);

enum_value!(
    ReportedStatus,
    "DeliveryStatusName",
    Some(
        "A status a runner may report: `pending → received → running → succeeded | failed`; \
         `failed` also from any live state."
    ),
    DeliveryStatusInput::REPORTABLE.iter().map(|s| s.as_str()),
    |raw| DeliveryStatusInput::parse_status(raw).map(ReportedStatus)
);

/// A JSON array of `T` with `MIN` to `MAX` items. Item errors name `field[i]` and echo the
/// item; the count is checked once every item has parsed.
pub struct List<T, const MIN: usize = 0, const MAX: usize = { usize::MAX }>(pub Vec<T>);

impl<T: Type, const MIN: usize, const MAX: usize> Type for List<T, MIN, MAX> {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        Vec::<T>::name()
    }

    fn schema_ref() -> MetaSchemaRef {
        Vec::<T>::schema_ref().merge(MetaSchema {
            min_items: (MIN > 0).then_some(MIN),
            max_items: (MAX < usize::MAX).then_some(MAX),
            ..MetaSchema::ANY
        })
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl<T: JsonValue, const MIN: usize, const MAX: usize> JsonField for List<T, MIN, MAX> {
    fn read(field: &str, value: Value, errors: &mut ValidationErrors) -> Option<Self> {
        let Value::Array(items) = value else {
            errors.push(FieldError::new(field, "must be an array").with_value(value));
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.into_iter().enumerate() {
            let result = T::parse(&item).map_err(|invalid| {
                let reason = match invalid {
                    Invalid::Type(reason) => reason.to_owned(),
                    Invalid::Rule(reason) => reason,
                };
                FieldError::new(format!("{field}[{i}]"), reason).with_value(item.clone())
            });
            match errors.collect(result) {
                Some(v) => out.push(v),
                None => ok = false,
            }
        }
        if !ok {
            return None;
        }
        if let Err(reason) = item_count(out.len(), MIN, MAX) {
            errors.push(FieldError::new(field, reason));
            return None;
        }
        Some(Self(out))
    }
}

impl<T, const MIN: usize, const MAX: usize> Default for List<T, MIN, MAX> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T: ToJSON, const MIN: usize, const MAX: usize> ToJSON for List<T, MIN, MAX> {
    fn to_json(&self) -> Option<Value> {
        self.0.to_json()
    }
}
