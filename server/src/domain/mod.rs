//! Domain types: values that are valid by construction.

mod audit;
mod audit_chain;
pub mod audit_proof;
mod bounds;
mod correlation_id;
mod delivery;
mod dispatch;
mod email;
mod idempotency;
mod ids;
mod key_wrap;
pub mod operation;
mod principal;
mod role;
pub(crate) mod rules;
mod sample_rate;
mod scope;
mod signature;
mod span;
mod states;
mod timestamp;
mod token;
mod validation;
mod webhook;
mod webhook_secret;

pub use audit::{Actor, ActorKind, AuditEvent, NewAuditEvent, text_digest};
pub use audit_chain::{EventJson, GENESIS_HASH, UnhashableEvent, chain_hash, chain_hash_new};
pub use bounds::{
    MIN_TEXT_CHARS, NO_NUL_PATTERN, bounded_arg, bounded_integer, bounded_text, item_count,
    reject_nul,
};
pub use correlation_id::CorrelationId;
pub use delivery::{DeliveryUrl, EgressPolicy, LINK_LOCAL_REFUSED, RetrySchedule, is_link_local};
pub use dispatch::{DISPATCH_EVENT_TYPE, DispatchData, DispatchPayload, verify_webhook};
pub use email::{Email, InvalidEmail};
pub use idempotency::{IdempotencyKey, RecordCipher, UndecryptableRecord};
pub use ids::{SEQUENCE_PATTERN, UUID_CURSOR_PATTERN, parse_sequence, parse_uuid};
pub use key_wrap::{ForeignWrap, KeyEncryptionKey};
pub use operation::{Auth, Operation, OperationSpec, RateClass};
pub use principal::Principal;
pub use role::{Role, UnknownRole};
pub use sample_rate::SampleRate;
pub use scope::{Scope, Scopes, UnknownScope};
pub use signature::{
    CLOCK_TOLERANCE_SECS, Nonce, RunnerSignature, SignedHeaders, generate_keypair, public_key_of,
    sign_request, signing_message,
};
pub use span::Span;
pub use states::{CommandStatus, DeliveryStatus, ReportReason, ReviewStatus, RevisionState};
pub use timestamp::{TIMESTAMP_PATTERN, Timestamp};
pub use token::{
    ExpiresInDays, MalformedToken, PublicId, RevocationReason, TOKEN_PREFIX, TokenHasher,
    TokenName, TokenSecret,
};
pub use validation::{FieldError, ValidationErrors};
pub use webhook::{
    KEY_ID_CURSOR_PATTERN, ReceivedWebhook, WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TIMESTAMP_HEADER, WEBHOOK_TOLERANCE_SECS, WebhookKeys, WebhookPublicKey, WebhookSigner,
    WebhookVerifyError, parse_jwks, parse_whpk, verify_signature,
};
pub use webhook_secret::RunnerSecret;
