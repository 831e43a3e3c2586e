//! The measurement stored with each policy version (shared by both SQL adapters); written in
//! the transaction that inserts the version (`policies.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use crate::storage::records::dialect::Dialect;
use crate::storage::records::write_tx::WriteTx;
use crate::storage::{PolicyBudgetRecord, PolicyBudgetStore, StoreError};

#[derive(FromRow)]
struct BudgetRow {
    memory_budget_mib: i32,
    decisions: i32,
    failures: i32,
    p50_us: i64,
    p99_us: i64,
    max_us: i64,
    peak_memory_bytes: i64,
    deadline_ms: i64,
    measured_at: DateTime<Utc>,
}

pub(super) async fn insert_budget<S: Dialect>(
    tx: &mut WriteTx<S::DB>,
    policy_id: Uuid,
    b: &PolicyBudgetRecord,
) -> Result<(), StoreError> {
    S::query(
        "INSERT INTO policy_budgets (policy_id, memory_budget_mib, decisions, failures, p50_us,
             p99_us, max_us, peak_memory_bytes, deadline_ms, measured_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(policy_id)
    .bind(b.memory_budget_mib)
    .bind(b.decisions)
    .bind(b.failures)
    .bind(b.p50_us)
    .bind(b.p99_us)
    .bind(b.max_us)
    .bind(b.peak_memory_bytes)
    .bind(b.deadline_ms)
    .bind(b.measured_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[async_trait]
impl<S: Dialect> PolicyBudgetStore for S {
    async fn policy_budget(
        &self,
        policy_id: Uuid,
    ) -> Result<Option<PolicyBudgetRecord>, StoreError> {
        let row: Option<BudgetRow> = S::query(
            "SELECT memory_budget_mib, decisions, failures, p50_us, p99_us, max_us,
                    peak_memory_bytes, deadline_ms, measured_at
             FROM policy_budgets WHERE policy_id = $1",
        )
        .bind(policy_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(|r| PolicyBudgetRecord {
            memory_budget_mib: r.memory_budget_mib,
            decisions: r.decisions,
            failures: r.failures,
            p50_us: r.p50_us,
            p99_us: r.p99_us,
            max_us: r.max_us,
            peak_memory_bytes: r.peak_memory_bytes,
            deadline_ms: r.deadline_ms,
            measured_at: r.measured_at,
        }))
    }
}
