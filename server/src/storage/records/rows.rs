//! Rows and conversions both records adapters share: the columns of these tables decode to the
//! same Rust types in Postgres and SQLite, and the state names are the domain's.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::FromRow;
use uuid::Uuid;

use super::StoreError;
use super::{Plugin, PolicyRecord, RunnerPool, WebhookDelivery, Workflow, WorkflowRevision};
use crate::domain::{CommandStatus, DeliveryStatus, NewAuditEvent, RevisionState};
use crate::policy::Instances;

pub(crate) fn parse_state<T>(
    raw: &str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<T, StoreError> {
    parse(raw).map_err(|_| StoreError::Internal(format!("unknown stored state {raw:?}")))
}

#[derive(FromRow)]
pub(crate) struct PoolRow {
    pub(crate) id: Uuid,
    pub(crate) workspace_id: Uuid,
    pub(crate) name: String,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) deleted_at: Option<DateTime<Utc>>,
}

impl From<PoolRow> for RunnerPool {
    fn from(r: PoolRow) -> Self {
        Self {
            id: r.id,
            workspace_id: r.workspace_id,
            name: r.name,
            created_at: r.created_at,
            deleted_at: r.deleted_at,
        }
    }
}

pub(crate) const POOL_COLUMNS: &str = "id, workspace_id, name, created_at, deleted_at";

#[derive(FromRow)]
pub(crate) struct DeliveryRow {
    pub(crate) id: Uuid,
    pub(crate) command_id: Uuid,
    pub(crate) status: String,
    pub(crate) detail: Option<String>,
    pub(crate) exit_code: Option<i32>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
}

impl TryFrom<DeliveryRow> for WebhookDelivery {
    type Error = StoreError;
    fn try_from(r: DeliveryRow) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.id,
            command_id: r.command_id,
            status: parse_state(&r.status, DeliveryStatus::parse)?,
            detail: r.detail,
            exit_code: r.exit_code,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(FromRow)]
pub(crate) struct RevisionRow {
    pub(crate) id: Uuid,
    pub(crate) workflow_id: Uuid,
    pub(crate) workspace_id: Uuid,
    pub(crate) number: i32,
    pub(crate) state: String,
    pub(crate) requested_by: Option<Uuid>,
    pub(crate) requested_at: Option<DateTime<Utc>>,
    pub(crate) request_comment: Option<String>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) decided_by: Option<Uuid>,
    pub(crate) decided_at: Option<DateTime<Utc>>,
    pub(crate) decision_reason: Option<String>,
}

impl TryFrom<RevisionRow> for WorkflowRevision {
    type Error = StoreError;
    fn try_from(r: RevisionRow) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.id,
            workflow_id: r.workflow_id,
            workspace_id: r.workspace_id,
            number: r.number,
            state: parse_state(&r.state, RevisionState::parse)?,
            requested_by: r.requested_by,
            requested_at: r.requested_at,
            comment: r.request_comment,
            created_at: r.created_at,
            decided_by: r.decided_by,
            decided_at: r.decided_at,
            decision_reason: r.decision_reason,
        })
    }
}

#[derive(FromRow)]
pub(crate) struct WorkflowRow {
    pub(crate) id: Uuid,
    pub(crate) workspace_id: Uuid,
    pub(crate) name: String,
    pub(crate) created_at: DateTime<Utc>,
}

impl From<WorkflowRow> for Workflow {
    fn from(r: WorkflowRow) -> Self {
        Self {
            id: r.id,
            workspace_id: r.workspace_id,
            name: r.name,
            created_at: r.created_at,
        }
    }
}

pub(crate) const POLICY_COLUMNS: &str = "id, name, kind, version, digest, \
     CAST(length(bytes) AS BIGINT) AS size, created_at, instances";

/// A policy version without its bytes, with their size.
#[derive(FromRow)]
pub(crate) struct PolicyRow {
    pub(crate) id: Uuid,
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) version: i32,
    pub(crate) digest: String,
    pub(crate) size: i64,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) instances: String,
}

impl TryFrom<PolicyRow> for PolicyRecord {
    type Error = StoreError;
    fn try_from(r: PolicyRow) -> Result<Self, StoreError> {
        Ok(PolicyRecord {
            id: r.id,
            name: r.name,
            kind: r.kind,
            version: r.version,
            digest: r.digest,
            size: r.size,
            created_at: r.created_at,
            instances: parse_state(&r.instances, Instances::parse)?,
        })
    }
}

#[derive(FromRow)]
pub(crate) struct PluginRow {
    pub(crate) id: Uuid,
    pub(crate) organisation_id: Uuid,
    pub(crate) name: String,
    pub(crate) created_at: DateTime<Utc>,
}

impl From<PluginRow> for Plugin {
    fn from(r: PluginRow) -> Self {
        Self {
            id: r.id,
            organisation_id: r.organisation_id,
            name: r.name,
            created_at: r.created_at,
        }
    }
}

pub(crate) fn with_data(event: &NewAuditEvent, key: &str, value: Value) -> NewAuditEvent {
    let mut event = event.clone();
    if let Value::Object(data) = &mut event.data {
        data.insert(key.into(), value);
    }
    event
}

/// The open command statuses as an SQL list, `('queued', ...)`, for `status IN ...`: constants
/// of the code, written into the statement rather than bound, as the two backends bind lists
/// differently.
pub(crate) fn open_statuses() -> &'static str {
    static LIST: LazyLock<String> = LazyLock::new(|| {
        let quoted: Vec<String> = CommandStatus::OPEN
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        format!("({})", quoted.join(", "))
    });
    &LIST
}
