//! What the copy copies: every table with its columns and their kinds, in dependency order
//! ([`TABLES`]), the tables deliberately left behind with why ([`NOT_COPIED`]), and the typed
//! cells values cross in.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// How a column is stored, so each backend decodes and encodes it as its adapter does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Uuid,
    Text,
    Time,
    I16,
    I32,
    I64,
    Bool,
    Bytes,
    /// SQLite JSON text, Postgres `text[]`.
    TextList,
    /// SQLite JSON text of uuid strings, Postgres `uuid[]`.
    UuidList,
    /// SQLite JSON text, Postgres `jsonb`: carried as the stored text.
    Json,
}

/// One value of a row, `None` for NULL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Uuid(Option<Uuid>),
    Text(Option<String>),
    Time(Option<DateTime<Utc>>),
    I16(Option<i16>),
    I32(Option<i32>),
    I64(Option<i64>),
    Bool(Option<bool>),
    Bytes(Option<Vec<u8>>),
    TextList(Option<Vec<String>>),
    UuidList(Option<Vec<Uuid>>),
    Json(Option<String>),
}

impl Cell {
    pub(super) fn is_null(&self) -> bool {
        match self {
            Cell::Uuid(v) => v.is_none(),
            Cell::Text(v) | Cell::Json(v) => v.is_none(),
            Cell::Time(v) => v.is_none(),
            Cell::I16(v) => v.is_none(),
            Cell::I32(v) => v.is_none(),
            Cell::I64(v) => v.is_none(),
            Cell::Bool(v) => v.is_none(),
            Cell::Bytes(v) => v.is_none(),
            Cell::TextList(v) => v.is_none(),
            Cell::UuidList(v) => v.is_none(),
        }
    }

    /// NULL of the same kind.
    pub(super) fn null_like(&self) -> Cell {
        match self {
            Cell::Uuid(_) => Cell::Uuid(None),
            Cell::Text(_) => Cell::Text(None),
            Cell::Json(_) => Cell::Json(None),
            Cell::Time(_) => Cell::Time(None),
            Cell::I16(_) => Cell::I16(None),
            Cell::I32(_) => Cell::I32(None),
            Cell::I64(_) => Cell::I64(None),
            Cell::Bool(_) => Cell::Bool(None),
            Cell::Bytes(_) => Cell::Bytes(None),
            Cell::TextList(_) => Cell::TextList(None),
            Cell::UuidList(_) => Cell::UuidList(None),
        }
    }
}

/// A copied table.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) name: &'static str,
    /// Every column, the key first.
    pub(crate) columns: &'static [(&'static str, Kind)],
    /// Columns referring to rows of the same table: inserted NULL and set once every row
    /// exists, so no order of the rows is needed.
    pub(crate) deferred: &'static [&'static str],
    /// Rows the migrations insert (`policy_state`): updated by key rather than inserted, and
    /// not counted when deciding whether the target is empty.
    pub(crate) seeded: bool,
}

impl Table {
    const fn new(name: &'static str, columns: &'static [(&'static str, Kind)]) -> Self {
        Self {
            name,
            columns,
            deferred: &[],
            seeded: false,
        }
    }
}

use Kind::{Bool, Bytes, I16, I32, I64, Json, Text, TextList, Time, UuidList};
const ID: (&str, Kind) = ("id", Kind::Uuid);
const CREATED: (&str, Kind) = ("created_at", Time);

/// Every copied table, each after the tables it refers to.
pub(crate) const TABLES: &[Table] = &[
    Table::new("settings", &[("key", Text), ("value", Text), CREATED]),
    Table::new(
        "organisations",
        &[
            ID,
            ("name", Text),
            CREATED,
            ("audit_retention_seconds", I64),
        ],
    ),
    Table::new(
        "workspaces",
        &[
            ID,
            ("organisation_id", Kind::Uuid),
            ("name", Text),
            // The last sequence handed out: the target's next event continues after it.
            ("audit_seq", I64),
            CREATED,
            // The head of the hash chain: the target's next event links to it.
            ("audit_hash", Bytes),
        ],
    ),
    Table::new(
        "environments",
        &[ID, ("workspace_id", Kind::Uuid), ("name", Text), CREATED],
    ),
    Table::new(
        "users",
        &[
            ID,
            ("organisation_id", Kind::Uuid),
            ("email", Text),
            CREATED,
            ("role", Text),
            ("disabled_at", Time),
            ("disabled_reason", Text),
        ],
    ),
    Table {
        deferred: &["issued_by_token_id"],
        ..Table::new(
            "tokens",
            &[
                ID,
                ("public_id", Text),
                ("user_id", Kind::Uuid),
                ("organisation_id", Kind::Uuid),
                ("name", Text),
                ("secret_hash", Bytes),
                ("scopes", TextList),
                ("environment_ids", UuidList),
                CREATED,
                ("expires_at", Time),
                ("revoked_at", Time),
                ("issued_by_token_id", Kind::Uuid),
                ("last_used_at", Time),
                ("last_used_address", Text),
                ("last_used_agent", Text),
                ("expiry_notice_at", Time),
            ],
        )
    },
    Table::new(
        "token_previous_secrets",
        &[
            ("public_id", Text),
            ("token_id", Kind::Uuid),
            ("secret_hash", Bytes),
            ("replaced_at", Time),
            ("valid_until", Time),
        ],
    ),
    Table::new(
        "token_workspaces",
        &[
            ("token_id", Kind::Uuid),
            ("workspace_id", Kind::Uuid),
            ("position", I32),
            ("revoked_at", Time),
            ("revoked_reason", Text),
        ],
    ),
    Table::new(
        "audit_events",
        &[
            ID,
            ("organisation_id", Kind::Uuid),
            ("workspace_id", Kind::Uuid),
            ("seq", I64),
            ("event_type", Text),
            ("actor_kind", Text),
            ("actor_id", Kind::Uuid),
            ("target_kind", Text),
            ("target_id", Kind::Uuid),
            ("correlation_id", Text),
            ("occurred_at", Time),
            ("data", Json),
            ("appended", I64),
            // The chain hash covers the event as readers see it, never the stored bytes, so
            // it holds in the target whatever the JSON's stored form.
            ("hash", Bytes),
            ("actor_token_id", Kind::Uuid),
        ],
    ),
    Table::new(
        "audit_checkpoints",
        &[
            ("workspace_id", Kind::Uuid),
            ("last_seq", I64),
            ("hash", Bytes),
            ("removed", I64),
            CREATED,
            ("prev_seq", I64),
            ("prev_hash", Bytes),
            ("signed_at_ms", I64),
            ("kid", Text),
            ("signature", Bytes),
        ],
    ),
    Table::new(
        "audit_signed_heads",
        &[
            ("workspace_id", Kind::Uuid),
            ("seq", I64),
            ("hash", Bytes),
            ("signed_at_ms", I64),
            ("kid", Text),
            ("signature", Bytes),
        ],
    ),
    Table::new(
        "policies",
        &[
            ID,
            ("name", Text),
            ("kind", Text),
            ("version", I32),
            ("digest", Text),
            ("bytes", Bytes),
            CREATED,
            ("instances", Text),
        ],
    ),
    Table::new(
        "policy_activations",
        &[
            ("id", I64),
            ("kind", Text),
            ("policy_id", Kind::Uuid),
            ("activated_at", Time),
            ("rolled_back", Bool),
            ("forced", Bool),
        ],
    ),
    Table::new(
        "policy_budgets",
        &[
            ("policy_id", Kind::Uuid),
            ("memory_budget_mib", I32),
            ("decisions", I32),
            ("failures", I32),
            ("p50_us", I64),
            ("p99_us", I64),
            ("max_us", I64),
            ("peak_memory_bytes", I64),
            ("deadline_ms", I64),
            ("measured_at", Time),
        ],
    ),
    Table::new(
        "policy_shadows",
        &[
            ("kind", Text),
            ("policy_id", Kind::Uuid),
            ("started_at", Time),
        ],
    ),
    Table::new(
        "shadow_disagreements",
        &[
            ("id", I64),
            ("shadow_digest", Text),
            ("operation", Text),
            ("principal_id", Text),
            ("active_decision", Text),
            ("shadow_decision", Text),
            ("occurred_at", Time),
        ],
    ),
    Table {
        seeded: true,
        ..Table::new("policy_state", &[("id", I32), ("generation", I64)])
    },
    Table::new(
        "runner_pools",
        &[
            ID,
            ("workspace_id", Kind::Uuid),
            ("name", Text),
            CREATED,
            ("deleted_at", Time),
            ("deleted_reason", Text),
        ],
    ),
    Table::new(
        "runners",
        &[
            ID,
            ("pool_id", Kind::Uuid),
            ("name", Text),
            CREATED,
            ("delivery_url", Text),
            ("consecutive_failures", I32),
            ("last_chosen_at", Time),
            ("webhook_secret", Bytes),
            ("previous_webhook_secret", Bytes),
            ("previous_retires_at", Time),
            ("slow_streak", I32),
            ("held_until", Time),
            ("failing_since", Time),
            ("disabled_at", Time),
            ("disabled_reason", Text),
            ("removed_at", Time),
        ],
    ),
    Table::new(
        "runner_keys",
        &[
            ID,
            ("runner_id", Kind::Uuid),
            ("public_key", Bytes),
            CREATED,
            ("revoked_at", Time),
        ],
    ),
    Table::new(
        "runner_commands",
        &[
            ID,
            ("workspace_id", Kind::Uuid),
            ("pool_id", Kind::Uuid),
            ("environment_id", Kind::Uuid),
            ("command", Text),
            ("args", Json),
            ("timeout_seconds", I32),
            ("status", Text),
            ("submitted_by", Kind::Uuid),
            CREATED,
            ("updated_at", Time),
            ("deadline_at", Time),
        ],
    ),
    Table::new(
        "webhook_deliveries",
        &[
            ID,
            ("command_id", Kind::Uuid),
            ("status", Text),
            ("detail", Text),
            ("exit_code", I32),
            CREATED,
            ("updated_at", Time),
            ("attempts", I32),
            ("next_attempt_at", Time),
            ("waiting_for_runner", Bool),
            ("webhook_id", Kind::Uuid),
            ("resent_as", Kind::Uuid),
        ],
    ),
    Table::new(
        "webhook_attempts",
        &[
            ("delivery_id", Kind::Uuid),
            ("number", I32),
            ("runner_id", Kind::Uuid),
            ("url", Text),
            ("started_at", Time),
            ("finished_at", Time),
            ("status_code", I32),
            ("latency_ms", I32),
            ("error", Text),
        ],
    ),
    Table::new(
        "workflows",
        &[ID, ("workspace_id", Kind::Uuid), ("name", Text), CREATED],
    ),
    Table::new(
        "workflow_revisions",
        &[
            ID,
            ("workflow_id", Kind::Uuid),
            ("number", I32),
            ("state", Text),
            ("requested_by", Kind::Uuid),
            ("requested_at", Time),
            ("request_comment", Text),
            CREATED,
            ("decided_by", Kind::Uuid),
            ("decided_at", Time),
            ("decision_reason", Text),
        ],
    ),
    Table::new(
        "plugins",
        &[ID, ("organisation_id", Kind::Uuid), ("name", Text), CREATED],
    ),
    Table::new(
        "plugin_reviews",
        &[
            ID,
            ("plugin_id", Kind::Uuid),
            ("author_id", Kind::Uuid),
            ("organisation_id", Kind::Uuid),
            ("rating", I16),
            ("title", Text),
            ("body", Text),
            ("status", Text),
            ("reasons", TextList),
            ("labels", TextList),
            CREATED,
            ("updated_at", Time),
        ],
    ),
    Table::new(
        "review_reports",
        &[
            ID,
            ("review_id", Kind::Uuid),
            ("reporter_id", Kind::Uuid),
            ("reason", Text),
            ("comment", Text),
            CREATED,
        ],
    ),
    Table::new(
        "idempotency_outcomes",
        &[
            ("place", Text),
            ("fingerprint", Text),
            ("sealed", Bytes),
            ("expires_at", I64),
        ],
    ),
];

/// Tables deliberately left behind, with why (docs/operations.md, "Postgres and Redis").
pub(crate) const NOT_COPIED: &[(&str, &str)] = &[
    (
        "_sqlx_migrations",
        "the target's own migration history, written when it is migrated",
    ),
    (
        "embedded_idempotency_records",
        "fast state of the embedded default (Redis or the process holds it on Postgres); \
         expires within 24 h",
    ),
    (
        "embedded_idempotency_quotas",
        "fast state of the embedded default: a 24 h window of stored-response bytes",
    ),
    (
        "embedded_nonces",
        "fast state of the embedded default: runner nonces, kept minutes",
    ),
    (
        "policy_decisions",
        "a sampled, pruned log of recent policy decisions; the new store starts its own",
    ),
];
