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
}

impl Actor {
    pub fn user(id: Uuid) -> Self {
        Self {
            kind: ActorKind::User,
            id: Some(id),
        }
    }

    pub fn runner(id: Uuid) -> Self {
        Self {
            kind: ActorKind::Runner,
            id: Some(id),
        }
    }

    pub fn admin() -> Self {
        Self {
            kind: ActorKind::Admin,
            id: None,
        }
    }

    pub fn system() -> Self {
        Self {
            kind: ActorKind::System,
            id: None,
        }
    }
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
    pub target_kind: String,
    pub target_id: Uuid,
    pub correlation_id: String,
    pub occurred_at: DateTime<Utc>,
    /// The event's data as stored: JSON text, passed through to readers without re-parsing.
    pub data: Box<serde_json::value::RawValue>,
}
