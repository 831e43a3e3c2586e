//! `request_body!`: one declaration of a request body gives its struct, its reader (every
//! field's errors in order, then the properties it does not declare) and its schema, so the
//! reader and the document cannot disagree.

use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
use poem_openapi::types::Type;
use serde_json::Value;

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
            // `unused_mut`: a body without properties (an empty object) reads none.
            #[allow(unused_mut)]
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

            // As above: an empty object's schema has no property to register or require.
            #[allow(unused_mut, unused_imports, unused_variables)]
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
