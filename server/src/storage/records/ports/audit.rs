//! The durable audit log.

use async_trait::async_trait;
use uuid::Uuid;

use crate::domain::AuditEvent;
use crate::storage::StoreError;

/// The durable audit log.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// A workspace's events with a sequence below `before` (all when `None`), newest first.
    async fn list_events(
        &self,
        workspace_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError>;
    /// A workspace's events with a sequence above `after`, oldest first.
    async fn events_after(
        &self,
        workspace_id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError>;
    /// Numbers committed events still waiting for their sequence (Postgres numbers events after
    /// commit; a writer that died between the two leaves some). Nothing to do on SQLite.
    async fn settle_events(&self) -> Result<(), StoreError>;
}
