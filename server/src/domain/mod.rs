//! Domain types: values that are valid by construction.

mod audit;
mod correlation_id;
mod idempotency;
mod ids;
mod principal;
mod scope;
mod token;
mod validation;

pub use audit::{Actor, ActorKind, AuditEvent, NewAuditEvent};
pub use correlation_id::CorrelationId;
pub use idempotency::{IdempotencyKey, RecordCipher, UndecryptableRecord};
pub use ids::{parse_uuid, reject_nul};
pub use principal::Principal;
pub use scope::{Scope, Scopes, UnknownScope};
pub use token::{
    ExpiresInDays, MalformedToken, PublicId, RevocationReason, TOKEN_PREFIX, TokenHasher,
    TokenName, TokenSecret,
};
pub use validation::{FieldError, ValidationErrors};
