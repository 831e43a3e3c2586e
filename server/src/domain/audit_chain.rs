//! An audit event as readers see it ([`EventJson`]: the activity page's item, the stream's
//! `data:`, one line of `cpctl audit export`), and the hash chain that makes a workspace's log
//! tamper-evident.
//!
//! Each workspace event stores `hash = SHA-256(previous hash || canonical form)`, the first
//! after a checkpoint starting from the checkpoint's hash (or 32 zero bytes). The canonical
//! form is the event written as [`EventJson`] with its data re-written as canonical JSON (keys
//! sorted, no spaces): every field a reader sees, and nothing that depends on how a backend
//! stores JSON (Postgres `jsonb` reorders keys; SQLite keeps the text it was given).

use serde::Serialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{AuditEvent, NewAuditEvent, Timestamp};

/// The hash a workspace's chain starts from when no checkpoint gives one.
pub const GENESIS_HASH: [u8; 32] = [0; 32];

/// One event as the API writes it. The one serialisation of an event: the activity page, the
/// audit stream, the export and the chain's canonical form all use it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventJson<'a> {
    id: Uuid,
    sequence: i64,
    #[serde(rename = "type")]
    event_type: &'a str,
    actor: EventActor<'a>,
    target: EventTarget<'a>,
    correlation_id: &'a str,
    occurred_at: Timestamp,
    data: &'a RawValue,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventActor<'a> {
    kind: &'a str,
    id: Option<Uuid>,
    /// Left out when absent, so an event written before tokens were named hashes (and reads)
    /// as it always did.
    #[serde(skip_serializing_if = "Option::is_none")]
    token_id: Option<Uuid>,
}

#[derive(Serialize)]
struct EventTarget<'a> {
    kind: &'a str,
    id: Uuid,
}

impl<'a> From<&'a AuditEvent> for EventJson<'a> {
    fn from(e: &'a AuditEvent) -> Self {
        Self {
            id: e.id,
            sequence: e.sequence.unwrap_or_default(),
            event_type: &e.event_type,
            actor: EventActor {
                kind: &e.actor_kind,
                id: e.actor_id,
                token_id: e.actor_token_id,
            },
            target: EventTarget {
                kind: &e.target_kind,
                id: e.target_id,
            },
            correlation_id: &e.correlation_id,
            occurred_at: Timestamp::new(e.occurred_at),
            data: &e.data,
        }
    }
}

/// Why an event could not be hashed: its stored data is not JSON.
#[derive(Debug, thiserror::Error)]
#[error("event data is not JSON: {0}")]
pub struct UnhashableEvent(#[from] serde_json::Error);

/// Data as canonical JSON: keys sorted (serde_json's map is ordered), no spaces.
fn canonical_data(data: &str) -> Result<Box<RawValue>, UnhashableEvent> {
    let value: serde_json::Value = serde_json::from_str(data)?;
    Ok(RawValue::from_string(value.to_string())?)
}

fn chain(prev: &[u8], json: &EventJson<'_>) -> Result<[u8; 32], UnhashableEvent> {
    let canonical = serde_json::to_vec(json)?;
    let mut hasher = Sha256::new();
    hasher.update(prev);
    hasher.update(&canonical);
    Ok(hasher.finalize().into())
}

/// The hash of a stored event that follows `prev` in its workspace's chain.
pub fn chain_hash(prev: &[u8], event: &AuditEvent) -> Result<[u8; 32], UnhashableEvent> {
    let data = canonical_data(event.data.get())?;
    let mut json = EventJson::from(event);
    json.data = &data;
    chain(prev, &json)
}

/// The hash of an event being written with `id` and `seq` (SQLite numbers, and hashes, as it
/// inserts): the same as [`chain_hash`] of the row once read back.
pub fn chain_hash_new(
    prev: &[u8],
    id: Uuid,
    seq: i64,
    event: &NewAuditEvent,
) -> Result<[u8; 32], UnhashableEvent> {
    let data = RawValue::from_string(event.data.to_string())?;
    let json = EventJson {
        id,
        sequence: seq,
        event_type: event.event_type,
        actor: EventActor {
            kind: event.actor.kind.as_str(),
            id: event.actor.id,
            token_id: event.actor.token_id,
        },
        target: EventTarget {
            kind: event.target_kind,
            id: event.target_id,
        },
        correlation_id: &event.correlation_id,
        occurred_at: Timestamp::new(event.occurred_at),
        data: &data,
    };
    chain(prev, &json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Actor;

    fn new_event(data: serde_json::Value) -> NewAuditEvent {
        NewAuditEvent {
            organisation_id: Uuid::new_v4(),
            workspace_id: Some(Uuid::new_v4()),
            event_type: "token.issued",
            actor: Actor::admin(),
            target_kind: "token",
            target_id: Uuid::new_v4(),
            correlation_id: "corr-0001".into(),
            occurred_at: chrono::Utc::now(),
            data,
        }
    }

    fn stored(id: Uuid, seq: i64, e: &NewAuditEvent, data: &str) -> AuditEvent {
        AuditEvent {
            id,
            organisation_id: e.organisation_id,
            workspace_id: e.workspace_id,
            sequence: Some(seq),
            event_type: e.event_type.into(),
            actor_kind: e.actor.kind.as_str().into(),
            actor_id: e.actor.id,
            actor_token_id: e.actor.token_id,
            target_kind: e.target_kind.into(),
            target_id: e.target_id,
            correlation_id: e.correlation_id.clone(),
            occurred_at: e.occurred_at,
            data: RawValue::from_string(data.into()).unwrap(),
        }
    }

    /// An event without a token hashes as every event did before events named their token, so
    /// the chains written then still verify; with one, the token is covered.
    #[test]
    fn an_absent_token_leaves_the_canonical_form_as_it_was() {
        let mut e = new_event(serde_json::json!({}));
        let id = Uuid::new_v4();
        let read = stored(id, 1, &e, "{}");
        let json = serde_json::to_value(EventJson::from(&read)).unwrap();
        assert_eq!(
            json["actor"],
            serde_json::json!({"kind": "admin", "id": null})
        );
        let without = chain_hash(&GENESIS_HASH, &read).unwrap();
        e.actor = Actor::user(Uuid::new_v4(), Uuid::new_v4());
        let with = stored(id, 1, &e, "{}");
        let json = serde_json::to_value(EventJson::from(&with)).unwrap();
        assert_eq!(
            json["actor"]["tokenId"],
            serde_json::json!(e.actor.token_id.unwrap())
        );
        assert_ne!(chain_hash(&GENESIS_HASH, &with).unwrap(), without);
        assert_eq!(
            chain_hash_new(&GENESIS_HASH, id, 1, &e).unwrap(),
            chain_hash(&GENESIS_HASH, &with).unwrap()
        );
    }

    #[test]
    fn the_hash_at_insert_is_the_hash_of_the_row_read_back_whatever_its_key_order() {
        let e = new_event(serde_json::json!({"b": 1, "a": [true, null, "x"]}));
        let id = Uuid::new_v4();
        let at_insert = chain_hash_new(&GENESIS_HASH, id, 7, &e).unwrap();
        // As jsonb gives it back: other key order, spaces.
        let read = stored(id, 7, &e, r#"{"a": [true, null, "x"], "b": 1}"#);
        assert_eq!(chain_hash(&GENESIS_HASH, &read).unwrap(), at_insert);
    }

    #[test]
    fn every_field_and_the_previous_hash_change_the_hash() {
        let e = new_event(serde_json::json!({"a": 1}));
        let id = Uuid::new_v4();
        let base = chain_hash(&GENESIS_HASH, &stored(id, 1, &e, r#"{"a":1}"#)).unwrap();
        assert_ne!(
            chain_hash(&[1; 32], &stored(id, 1, &e, r#"{"a":1}"#)).unwrap(),
            base
        );
        assert_ne!(
            chain_hash(&GENESIS_HASH, &stored(id, 2, &e, r#"{"a":1}"#)).unwrap(),
            base
        );
        assert_ne!(
            chain_hash(&GENESIS_HASH, &stored(id, 1, &e, r#"{"a":2}"#)).unwrap(),
            base
        );
        let mut other = stored(id, 1, &e, r#"{"a":1}"#);
        other.correlation_id = "corr-0002".into();
        assert_ne!(chain_hash(&GENESIS_HASH, &other).unwrap(), base);
    }
}
