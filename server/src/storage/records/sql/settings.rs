//! Server-wide settings (shared by both SQL adapters; see the layout in `storage/mod.rs`).

use async_trait::async_trait;

use crate::domain::NewAuditEvent;
use crate::storage::records::dialect::Dialect;
use crate::storage::{SettingsStore, StoreError, WriteContext};

#[async_trait]
impl<S: Dialect> SettingsStore for S {
    async fn ping(&self) -> Result<(), StoreError> {
        S::query("SELECT 1").execute(self.pool()).await?;
        Ok(())
    }

    async fn setting_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        let row: Option<(String,)> = S::query("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.map(|(v,)| v))
    }

    async fn setting_get_or_insert(
        &self,
        write: &WriteContext,
        key: &str,
        candidate: &str,
    ) -> Result<(String, bool), StoreError> {
        let mut tx = self.begin(write).await?;
        let inserted = S::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(candidate)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        let (value,): (String,) = S::query("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_one(&mut *tx)
            .await?;
        self.commit(tx, write).await?;
        Ok((value, inserted))
    }

    async fn setting_replace(
        &self,
        write: &WriteContext,
        key: &str,
        expected: &str,
        value: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        let replaced = S::query("UPDATE settings SET value = $3 WHERE key = $1 AND value = $2")
            .bind(key)
            .bind(expected)
            .bind(value)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        self.commit(tx, write).await?;
        Ok(replaced)
    }

    async fn setting_put(
        &self,
        write: &WriteContext,
        key: &str,
        value: &str,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(value)
        .execute(&mut *tx)
        .await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }
}
