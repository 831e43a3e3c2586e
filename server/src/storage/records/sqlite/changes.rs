//! The change feed, in process: this process's audit events, at commit. Other processes'
//! (`cpctl`) and every policy change are not announced; consumers poll for them.

use async_trait::async_trait;
use tokio::sync::broadcast;

use super::SqliteStore;
use crate::storage::{Change, ChangeFeed, ChangeStream, Topic};

#[async_trait]
impl ChangeFeed for SqliteStore {
    async fn changes(&self, topic: Topic) -> ChangeStream {
        if topic != Topic::AuditEvents {
            return ChangeStream::silent();
        }
        let announced = self.announced.subscribe();
        ChangeStream::new(
            futures_util::stream::unfold(announced, |mut announced| async move {
                let change = match announced.recv().await {
                    Ok(change) => change,
                    Err(broadcast::error::RecvError::Lagged(_)) => Change::Resync,
                    Err(broadcast::error::RecvError::Closed) => return None,
                };
                Some((change, announced))
            }),
            false,
        )
    }
}
