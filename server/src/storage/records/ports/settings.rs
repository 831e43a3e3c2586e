//! Server-wide settings.

use async_trait::async_trait;

use crate::domain::NewAuditEvent;
use crate::storage::StoreError;
use crate::storage::WriteContext;

/// Server-wide settings, such as a generated key kept for the next start.
#[async_trait]
pub trait SettingsStore: Send + Sync {
    async fn ping(&self) -> Result<(), StoreError>;
    async fn setting_get(&self, key: &str) -> Result<Option<String>, StoreError>;
    /// Returns the stored value, inserting `candidate` first when there is none.
    /// The flag is true when `candidate` was inserted.
    async fn setting_get_or_insert(
        &self,
        write: &WriteContext,
        key: &str,
        candidate: &str,
    ) -> Result<(String, bool), StoreError>;
    /// Replaces the value only while it is still `expected`; false when it changed meanwhile.
    async fn setting_replace(
        &self,
        write: &WriteContext,
        key: &str,
        expected: &str,
        value: &str,
    ) -> Result<bool, StoreError>;
    /// Sets `key` to `value` (inserting or replacing it), with the event that records the
    /// change, in one transaction.
    async fn setting_put(
        &self,
        write: &WriteContext,
        key: &str,
        value: &str,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError>;
}
