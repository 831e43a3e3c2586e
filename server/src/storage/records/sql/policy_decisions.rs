//! The policy decision log, shared by both SQL adapters.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use crate::storage::records::dialect::Dialect;
use crate::storage::{
    DecisionBounds, DecisionFilter, PolicyDecisionRecord, PolicyDecisionStore, StoreError,
    WriteContext,
};

/// A row by column name: thirteen columns, several of them strings, are too many to map by
/// position.
#[derive(FromRow)]
struct DecisionRow {
    id: i64,
    occurred_at: DateTime<Utc>,
    kind: String,
    operation: String,
    outcome: String,
    failure: Option<String>,
    reason: Option<String>,
    policy_name: String,
    policy_version: i32,
    policy_digest: String,
    latency_us: i64,
    correlation_id: Option<String>,
    organisation_id: Option<Uuid>,
    workspace_id: Option<Uuid>,
}

impl From<DecisionRow> for (i64, PolicyDecisionRecord) {
    fn from(row: DecisionRow) -> Self {
        let record = PolicyDecisionRecord {
            occurred_at: row.occurred_at,
            kind: row.kind,
            operation: row.operation,
            outcome: row.outcome,
            failure: row.failure,
            reason: row.reason,
            policy_name: row.policy_name,
            policy_version: row.policy_version,
            policy_digest: row.policy_digest,
            latency_us: row.latency_us,
            correlation_id: row.correlation_id,
            organisation_id: row.organisation_id,
            workspace_id: row.workspace_id,
        };
        (row.id, record)
    }
}

#[async_trait]
impl<S: Dialect> PolicyDecisionStore for S {
    async fn insert_decisions(
        &self,
        write: &WriteContext,
        decisions: &[PolicyDecisionRecord],
    ) -> Result<u64, StoreError> {
        if decisions.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin(write).await?;
        let mut written = 0;
        for d in decisions {
            written += S::query(
                "INSERT INTO policy_decisions (occurred_at, kind, operation, outcome, failure,
                     reason, policy_name, policy_version, policy_digest, latency_us,
                     correlation_id, organisation_id, workspace_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            )
            .bind(d.occurred_at)
            .bind(&d.kind)
            .bind(&d.operation)
            .bind(&d.outcome)
            .bind(d.failure.as_deref())
            .bind(d.reason.as_deref())
            .bind(&d.policy_name)
            .bind(d.policy_version)
            .bind(&d.policy_digest)
            .bind(d.latency_us)
            .bind(d.correlation_id.as_deref())
            .bind(d.organisation_id)
            .bind(d.workspace_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        self.commit(tx, write).await?;
        Ok(written)
    }

    async fn list_decisions(
        &self,
        filter: &DecisionFilter,
    ) -> Result<Vec<(i64, PolicyDecisionRecord)>, StoreError> {
        let (before_at, before_id) = filter.before.unzip();
        let rows: Vec<DecisionRow> = S::query(
            "SELECT id, occurred_at, kind, operation, outcome, failure, reason, policy_name,
                    policy_version, policy_digest, latency_us, correlation_id, organisation_id,
                    workspace_id
             FROM policy_decisions
             WHERE ($1 IS NULL OR occurred_at >= $1)
               AND ($2 IS NULL OR operation = $2)
               AND ($3 IS NULL OR outcome = $3)
               AND ($5 IS NULL OR occurred_at < $5 OR (occurred_at = $5 AND id < $6))
             ORDER BY occurred_at DESC, id DESC
             LIMIT $4",
        )
        .bind(filter.since)
        .bind(filter.operation.as_deref())
        .bind(filter.outcome.as_deref())
        .bind(i64::from(filter.limit))
        .bind(before_at)
        .bind(before_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn prune_decisions(&self, bounds: DecisionBounds) -> Result<u64, StoreError> {
        let aged = S::query("DELETE FROM policy_decisions WHERE occurred_at < $1")
            .bind(bounds.older_than)
            .execute(self.pool())
            .await?
            .rows_affected();
        // Everything at or below the id of the first row beyond the newest `max_rows`; nothing
        // when there are fewer (the subquery is NULL).
        let max_rows = i64::try_from(bounds.max_rows).unwrap_or(i64::MAX);
        let counted = S::query(
            "DELETE FROM policy_decisions WHERE id <= (
                 SELECT id FROM policy_decisions ORDER BY id DESC LIMIT 1 OFFSET $1)",
        )
        .bind(max_rows)
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(aged + counted)
    }
}
