use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActorKind {
    /// A caller authenticated by a token; the id is the token's owner.
    User,
    /// An operator using `cpctl` against the records store.
    Admin,
    /// A runner authenticated by its signature.
    Runner,
    /// The control plane itself, acting on a rule with nobody asking (a command timing out).
    System,
}

impl ActorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::User => "user",
            ActorKind::Admin => "admin",
            ActorKind::Runner => "runner",
            ActorKind::System => "system",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actor {
    pub kind: ActorKind,
    pub id: Option<Uuid>,
    /// The token a user acted with; `None` for every other kind (and for events written
    /// before tokens were named).
    pub token_id: Option<Uuid>,
}

impl Actor {
    /// A user acting with one of its tokens: the event names both.
    pub fn user(id: Uuid, token_id: Uuid) -> Self {
        Self {
            kind: ActorKind::User,
            id: Some(id),
            token_id: Some(token_id),
        }
    }

    /// A user acting without a token (approving by a signed link): the user only.
    pub fn user_only(id: Uuid) -> Self {
        Self {
            kind: ActorKind::User,
            id: Some(id),
            token_id: None,
        }
    }

    pub fn runner(id: Uuid) -> Self {
        Self {
            kind: ActorKind::Runner,
            id: Some(id),
            token_id: None,
        }
    }

    pub fn admin() -> Self {
        Self {
            kind: ActorKind::Admin,
            id: None,
            token_id: None,
        }
    }

    pub fn system() -> Self {
        Self {
            kind: ActorKind::System,
            id: None,
            token_id: None,
        }
    }
}

/// What an event says of a text it must not carry (a command line may hold a password): its
/// length in UTF-8 bytes and its SHA-256 in lowercase hex. Whoever holds the text can check it
/// is the one recorded; a reader of the log learns neither the text nor its words.
pub fn text_digest(text: &str) -> (usize, String) {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(text.as_bytes());
    let hex = digest.iter().map(|b| format!("{b:02x}")).collect();
    (text.len(), hex)
}

/// An audit event to be written in the same transaction as the change it records.
/// `data` never holds a secret.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAuditEvent {
    pub organisation_id: Uuid,
    /// `None` for organisation-level events, which belong to no workspace's sequence.
    pub workspace_id: Option<Uuid>,
    pub event_type: &'static str,
    pub actor: Actor,
    pub target_kind: &'static str,
    pub target_id: Uuid,
    pub correlation_id: String,
    pub occurred_at: DateTime<Utc>,
    pub data: Value,
}

/// A stored audit event; `sequence` is gapless per workspace.
#[derive(Debug, Clone)]
pub struct AuditEvent {
    pub id: Uuid,
    pub organisation_id: Uuid,
    pub workspace_id: Option<Uuid>,
    pub sequence: Option<i64>,
    pub event_type: String,
    pub actor_kind: String,
    pub actor_id: Option<Uuid>,
    pub actor_token_id: Option<Uuid>,
    pub target_kind: String,
    pub target_id: Uuid,
    pub correlation_id: String,
    pub occurred_at: DateTime<Utc>,
    /// The event's data as stored: JSON text, passed through to readers without re-parsing.
    pub data: Box<serde_json::value::RawValue>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_text_digest_is_its_length_and_sha256() {
        let (length, digest) = super::text_digest("abc");
        assert_eq!(length, 3);
        assert_eq!(
            digest,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
