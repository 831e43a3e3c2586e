//! The values of request and response bodies as the OpenAPI document describes them. Each
//! type's schema is built from the same constants (and enum lists) as its parser, so the
//! document cannot state a bound the server does not enforce, or the reverse.
//!
//! Request bodies are declared with [`request_body!`]: one list of properties gives the
//! struct, its reader (every field's errors, in order, then unknown properties) and its schema.

use std::borrow::Cow;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef, Registry};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::domain::{
    CommandStatus, DeliveryStatus, ExpiresInDays, FieldError, MIN_TEXT_CHARS, NO_NUL_PATTERN,
    ReportReason, ReviewStatus, RevisionState, RevocationReason, Scope, TIMESTAMP_PATTERN,
    Timestamp, TokenName, ValidationErrors, bounded_text, parse_uuid,
};
use crate::service::{DeliveryStatusInput, ReviewInput, SubmitCommandInput};

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
        let s = string(value)?;
        if s.contains('\0') || s.chars().count() > SubmitCommandInput::MAX_ARG {
            Err(Invalid::Rule(format!(
                "must be at most {} characters without NUL",
                SubmitCommandInput::MAX_ARG
            )))
        } else {
            Ok(Self(s.to_owned()))
        }
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
    ReportReason,
    "ReportReasonName",
    None,
    ReportReason::ALL.iter().map(|r| r.as_str()),
    ReportReason::parse
);

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
        if out.len() < MIN {
            let plural = if MIN == 1 { "" } else { "s" };
            errors.push(FieldError::new(
                field,
                format!("must contain at least {MIN} item{plural}"),
            ));
            return None;
        }
        if out.len() > MAX {
            errors.push(FieldError::new(
                field,
                format!("must have at most {MAX} items"),
            ));
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

/// The document's description of a type or property, from its doc comment: each line trimmed,
/// joined by newlines (as poem-openapi's derive macros do).
pub fn description(lines: &[&'static str]) -> Option<String> {
    let lines: Vec<&str> = lines.iter().map(|l| l.trim()).collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// A property's schema: its type's, with the property's default and description. A property
/// of a named type stays a bare `$ref`: merging would wrap it in an `allOf` of the reference
/// and a description-only object, which openapi-python-client refuses ("Cannot take allOf a
/// non-object"). Such a type carries its own description; `register_enum` sets it.
pub fn property<T: Type>(
    default: Option<Value>,
    description: Option<&'static str>,
) -> MetaSchemaRef {
    let schema = T::schema_ref();
    if matches!(schema, MetaSchemaRef::Reference(_)) {
        return schema;
    }
    schema.merge(MetaSchema {
        default,
        description,
        ..MetaSchema::ANY
    })
}

/// Declares a request body: a struct whose properties are read in the order given (each
/// failure recorded, then every property not declared refused) and documented with the
/// schema of their types. A property is `required T`, `optional T` (an `Option<T>`) or
/// `default T` (`T::default()` when absent, shown as the schema's default).
macro_rules! request_body {
    (
        $(#[doc = $doc:literal])*
        pub struct $name:ident {
            $(
                $(#[doc = $fdoc:literal])*
                $json:literal => $field:ident: $kind:ident $ty:ty
            ),* $(,)?
        }
    ) => {
        $(#[doc = $doc])*
        pub struct $name {
            $(
                $(#[doc = $fdoc])*
                pub $field: request_body!(@type $kind $ty),
            )*
        }

        impl $crate::http::payload::DeclaredBody for $name {
            fn from_json(
                value: ::serde_json::Value,
            ) -> ::std::result::Result<Self, $crate::domain::ValidationErrors> {
                let mut body = $crate::http::payload::JsonObject::new(value)?;
                $(
                    let $field = body.field::<$ty>($json, request_body!(@required $kind));
                )*
                body.finish()?;
                Ok(Self {
                    $( $field: request_body!(@value $kind $field $json), )*
                })
            }
        }

        impl ::poem_openapi::types::Type for $name {
            const IS_REQUIRED: bool = true;
            type RawValueType = Self;
            type RawElementValueType = Self;

            fn name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn schema_ref() -> ::poem_openapi::registry::MetaSchemaRef {
                ::poem_openapi::registry::MetaSchemaRef::Reference(stringify!($name).into())
            }

            fn register(registry: &mut ::poem_openapi::registry::Registry) {
                use ::std::sync::OnceLock;
                use $crate::http::fields::{description, property};
                registry.create_schema::<Self, _>(stringify!($name).into(), |registry| {
                    $( <$ty as ::poem_openapi::types::Type>::register(registry); )*
                    static DOC: OnceLock<Option<String>> = OnceLock::new();
                    let mut required = Vec::new();
                    $(
                        if request_body!(@required $kind) {
                            required.push($json);
                        }
                    )*
                    ::poem_openapi::registry::MetaSchema {
                        title: Some(stringify!($name).into()),
                        description: DOC
                            .get_or_init(|| description(&[$($doc),*]))
                            .as_deref(),
                        required,
                        properties: vec![$(
                            ($json, {
                                static DOC: OnceLock<Option<String>> = OnceLock::new();
                                property::<$ty>(
                                    request_body!(@default $kind $ty),
                                    DOC.get_or_init(|| description(&[$($fdoc),*])).as_deref(),
                                )
                            }),
                        )*],
                        ..::poem_openapi::registry::MetaSchema::new("object")
                    }
                })
            }

            fn as_raw_value(&self) -> Option<&Self> {
                Some(self)
            }

            fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
                Box::new(self.as_raw_value().into_iter())
            }
        }
    };
    (@type required $ty:ty) => { $ty };
    (@type default $ty:ty) => { $ty };
    (@type optional $ty:ty) => { Option<$ty> };
    (@required required) => { true };
    (@required $other:ident) => { false };
    (@default default $ty:ty) => {
        ::poem_openapi::types::ToJSON::to_json(&<$ty as ::std::default::Default>::default())
    };
    (@default $other:ident $ty:ty) => { None };
    (@value required $field:ident $json:literal) => {
        // Recorded as an error already when absent; `finish` returned it.
        $field.ok_or_else(|| $crate::domain::FieldError::new($json, "is required"))?
    };
    (@value optional $field:ident $json:literal) => { $field };
    (@value default $field:ident $json:literal) => { $field.unwrap_or_default() };
}

pub(crate) use request_body;
