//! What a policy version measured at install, and the memory budget it runs under.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::storage::StoreError;

/// A version's measurement (`policy/budget.rs`), stored with it at install.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyBudgetRecord {
    pub memory_budget_mib: i32,
    pub decisions: i32,
    pub failures: i32,
    pub p50_us: i64,
    pub p99_us: i64,
    pub max_us: i64,
    pub peak_memory_bytes: i64,
    pub deadline_ms: i64,
    pub measured_at: DateTime<Utc>,
}

#[async_trait]
pub trait PolicyBudgetStore: Send + Sync {
    /// The measurement of a version; `None` for one installed before versions were measured.
    async fn policy_budget(
        &self,
        policy_id: Uuid,
    ) -> Result<Option<PolicyBudgetRecord>, StoreError>;
}
