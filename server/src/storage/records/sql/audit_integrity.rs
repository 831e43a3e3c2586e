//! The audit log's chain, checkpoints, retention and export (shared by both SQL adapters;
//! the port is `ports/audit_integrity.rs`, the rules `service/audit_integrity.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::audit::{EVENT_COLUMNS, EventRow};
use crate::domain::audit_proof::{CheckpointClaim, Seal, SignedHead};
use crate::domain::{AuditEvent, NewAuditEvent};
use crate::storage::records::dialect::Dialect;
use crate::storage::{
    AuditCheckpoint, AuditHead, AuditIntegrityStore, ChainedEvent, CheckpointSealer, StoreError,
    TimeWindow, WriteContext,
};

/// An event row followed by its stored hash.
struct ChainedRow(EventRow, Option<Vec<u8>>);

impl<'r, R: sqlx::Row> sqlx::FromRow<'r, R> for ChainedRow
where
    EventRow: sqlx::FromRow<'r, R>,
    usize: sqlx::ColumnIndex<R>,
    Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        Ok(Self(EventRow::from_row(row)?, row.try_get(13)?))
    }
}

const CHECKPOINT_COLUMNS: &str = "workspace_id, last_seq, hash, removed, created_at, prev_seq, \
     prev_hash, signed_at_ms, kid, signature";

type CheckpointRow = (
    Uuid,
    i64,
    Option<Vec<u8>>,
    i64,
    DateTime<Utc>,
    Option<i64>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<String>,
    Option<Vec<u8>>,
);

fn checkpoint(
    (workspace_id, last_seq, hash, removed, created_at, prev_seq, prev_hash, at, kid, sig): CheckpointRow,
) -> AuditCheckpoint {
    let seal = match (at, kid, sig) {
        (Some(signed_at_ms), Some(kid), Some(signature)) => Some(Seal {
            kid,
            signed_at_ms,
            signature,
        }),
        _ => None,
    };
    AuditCheckpoint {
        workspace_id,
        last_seq,
        hash,
        removed,
        created_at,
        prev_seq,
        prev_hash,
        seal,
    }
}

type SignedHeadRow = (Uuid, i64, Vec<u8>, i64, String, Vec<u8>);

const SIGNED_HEAD_COLUMNS: &str = "workspace_id, seq, hash, signed_at_ms, kid, signature";

fn signed_head(
    (workspace_id, seq, hash, signed_at_ms, kid, signature): SignedHeadRow,
) -> SignedHead {
    SignedHead {
        workspace_id,
        seq,
        hash,
        seal: Seal {
            kid,
            signed_at_ms,
            signature,
        },
    }
}

const INSERT_SIGNED_HEAD: &str = "INSERT INTO audit_signed_heads
     (workspace_id, seq, hash, signed_at_ms, kid, signature) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (workspace_id, seq) DO NOTHING";

#[async_trait]
impl<S: Dialect> AuditIntegrityStore for S {
    async fn chained_events(
        &self,
        workspace_id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<ChainedEvent>, StoreError> {
        let rows: Vec<ChainedRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS}, hash FROM audit_events
             WHERE workspace_id = $1 AND seq > $2
             ORDER BY seq LIMIT $3"
        )))
        .bind(workspace_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|ChainedRow(row, hash)| ChainedEvent {
                event: row.into_event(),
                hash,
            })
            .collect())
    }

    async fn audit_head(&self, workspace_id: Uuid) -> Result<Option<AuditHead>, StoreError> {
        let row: Option<(i64, Option<Vec<u8>>)> =
            S::query("SELECT audit_seq, audit_hash FROM workspaces WHERE id = $1")
                .bind(workspace_id)
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(|(seq, hash)| AuditHead { seq, hash }))
    }

    async fn latest_checkpoint(
        &self,
        workspace_id: Uuid,
    ) -> Result<Option<AuditCheckpoint>, StoreError> {
        let row: Option<CheckpointRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints
             WHERE workspace_id = $1 ORDER BY last_seq DESC LIMIT 1"
        )))
        .bind(workspace_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(checkpoint))
    }

    async fn removed_through(&self, workspace_id: Uuid) -> Result<Option<i64>, StoreError> {
        let row: Option<(i64,)> = S::query(
            "SELECT last_seq FROM audit_checkpoints WHERE workspace_id = $1 AND removed > 0
             ORDER BY last_seq DESC LIMIT 1",
        )
        .bind(workspace_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(|(seq,)| seq))
    }

    async fn export_events(
        &self,
        workspace_id: Uuid,
        after: i64,
        window: TimeWindow,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let rows: Vec<EventRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM audit_events
             WHERE workspace_id = $1 AND seq > $2
               AND ($3 IS NULL OR occurred_at >= $3)
               AND ($4 IS NULL OR occurred_at < $4)
             ORDER BY seq LIMIT $5"
        )))
        .bind(workspace_id)
        .bind(after)
        .bind(window.since)
        .bind(window.until)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(EventRow::into_event).collect())
    }

    async fn set_audit_retention(
        &self,
        write: &WriteContext,
        organisation_id: Uuid,
        seconds: Option<i64>,
        event: &NewAuditEvent,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(write).await?;
        let found = S::query("UPDATE organisations SET audit_retention_seconds = $2 WHERE id = $1")
            .bind(organisation_id)
            .bind(seconds)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if !found {
            return Ok(false);
        }
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await?;
        Ok(true)
    }

    async fn record_event(
        &self,
        write: &WriteContext,
        event: &NewAuditEvent,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin(write).await?;
        S::insert_event(&mut tx, event).await?;
        self.commit(tx, write).await
    }

    async fn retention_workspaces(&self) -> Result<Vec<(Uuid, i64)>, StoreError> {
        S::query(
            "SELECT w.id, o.audit_retention_seconds FROM workspaces w
             JOIN organisations o ON o.id = w.organisation_id
             WHERE o.audit_retention_seconds IS NOT NULL",
        )
        .fetch_all(self.pool())
        .await
    }

    async fn remove_expired_events(
        &self,
        workspace_id: Uuid,
        cutoff: DateTime<Utc>,
        batch: u32,
        now: DateTime<Utc>,
        sealer: &dyn CheckpointSealer,
    ) -> Result<u64, StoreError> {
        let write = WriteContext::system();
        let mut tx = self.begin(&write).await?;
        // One remover per workspace at a time, across replicas (SQLite has one writer anyway).
        let locked: Option<(i64,)> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT audit_seq FROM workspaces WHERE id = $1 {}",
            S::FOR_UPDATE
        )))
        .bind(workspace_id)
        .fetch_optional(&mut *tx)
        .await?;
        if locked.is_none() {
            return Ok(0);
        }
        let oldest: Vec<(i64, DateTime<Utc>, Option<Vec<u8>>)> = S::query(
            "SELECT seq, occurred_at, hash FROM audit_events
             WHERE workspace_id = $1 AND seq IS NOT NULL ORDER BY seq LIMIT $2",
        )
        .bind(workspace_id)
        .bind(i64::from(batch))
        .fetch_all(&mut *tx)
        .await?;
        // Only a run from the oldest: the log stays a suffix, which the chain verifies.
        let run: Vec<_> = oldest
            .into_iter()
            .take_while(|(_, at, _)| *at < cutoff)
            .collect();
        let Some((last_seq, _, hash)) = run.last().cloned() else {
            return Ok(0);
        };
        let removed = S::query(
            "DELETE FROM audit_events WHERE workspace_id = $1 AND seq IS NOT NULL AND seq <= $2",
        )
        .bind(workspace_id)
        .bind(last_seq)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        // The checkpoint just below names the link; one at this sequence (the migration's, or
        // an earlier batch that stopped here) is replaced, its removals added.
        let below: Option<(i64, Option<Vec<u8>>)> = S::query(
            "SELECT last_seq, hash FROM audit_checkpoints
             WHERE workspace_id = $1 AND last_seq < $2 ORDER BY last_seq DESC LIMIT 1",
        )
        .bind(workspace_id)
        .bind(last_seq)
        .fetch_optional(&mut *tx)
        .await?;
        let earlier: Option<(i64,)> = S::query(
            "SELECT removed FROM audit_checkpoints WHERE workspace_id = $1 AND last_seq = $2",
        )
        .bind(workspace_id)
        .bind(last_seq)
        .fetch_optional(&mut *tx)
        .await?;
        let (prev_seq, prev_hash) = below.unwrap_or((0, None));
        let claim = CheckpointClaim {
            workspace_id,
            last_seq,
            hash: hash.clone(),
            prev_seq,
            prev_hash: prev_hash.clone(),
            removed: removed as i64 + earlier.map_or(0, |(r,)| r),
        };
        let (seal, head) = sealer.seal_checkpoint(&claim);
        S::query("DELETE FROM audit_checkpoints WHERE workspace_id = $1 AND last_seq = $2")
            .bind(workspace_id)
            .bind(last_seq)
            .execute(&mut *tx)
            .await?;
        S::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO audit_checkpoints ({CHECKPOINT_COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        )))
        .bind(workspace_id)
        .bind(last_seq)
        .bind(hash)
        .bind(claim.removed)
        .bind(now)
        .bind(prev_seq)
        .bind(prev_hash)
        .bind(seal.signed_at_ms)
        .bind(seal.kid)
        .bind(seal.signature)
        .execute(&mut *tx)
        .await?;
        if let Some(head) = head {
            S::query(INSERT_SIGNED_HEAD)
                .bind(head.workspace_id)
                .bind(head.seq)
                .bind(head.hash)
                .bind(head.seal.signed_at_ms)
                .bind(head.seal.kid)
                .bind(head.seal.signature)
                .execute(&mut *tx)
                .await?;
        }
        self.commit(tx, &write).await?;
        Ok(removed)
    }

    async fn checkpoints(&self, workspace_id: Uuid) -> Result<Vec<AuditCheckpoint>, StoreError> {
        let rows: Vec<CheckpointRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints
             WHERE workspace_id = $1 ORDER BY last_seq"
        )))
        .bind(workspace_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(checkpoint).collect())
    }

    async fn insert_signed_head(&self, head: &SignedHead) -> Result<bool, StoreError> {
        Ok(S::query(INSERT_SIGNED_HEAD)
            .bind(head.workspace_id)
            .bind(head.seq)
            .bind(head.hash.clone())
            .bind(head.seal.signed_at_ms)
            .bind(head.seal.kid.clone())
            .bind(head.seal.signature.clone())
            .execute(self.pool())
            .await?
            .rows_affected()
            == 1)
    }

    async fn signed_heads(
        &self,
        workspace_id: Uuid,
        from: i64,
        to: i64,
    ) -> Result<Vec<SignedHead>, StoreError> {
        let rows: Vec<SignedHeadRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SIGNED_HEAD_COLUMNS} FROM audit_signed_heads
             WHERE workspace_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq"
        )))
        .bind(workspace_id)
        .bind(from)
        .bind(to)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(signed_head).collect())
    }

    async fn latest_signed_head(
        &self,
        workspace_id: Uuid,
    ) -> Result<Option<SignedHead>, StoreError> {
        let row: Option<SignedHeadRow> = S::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SIGNED_HEAD_COLUMNS} FROM audit_signed_heads
             WHERE workspace_id = $1 ORDER BY seq DESC LIMIT 1"
        )))
        .bind(workspace_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(signed_head))
    }

    async fn heads_to_sign(
        &self,
        limit: u32,
        offset: u32,
    ) -> Result<Vec<(Uuid, AuditHead)>, StoreError> {
        // Primary-key probes per workspace (the highest signed sequence, and when it was
        // signed). Oldest signature first, never signed first: a fixed order would starve
        // the workspaces past the first page while the first ones keep moving.
        let rows: Vec<(Uuid, i64, Option<Vec<u8>>)> = S::query(
            "SELECT w.id, w.audit_seq, w.audit_hash FROM workspaces w
             WHERE w.audit_hash IS NOT NULL AND w.audit_seq > COALESCE(
                 (SELECT MAX(s.seq) FROM audit_signed_heads s WHERE s.workspace_id = w.id), 0)
             ORDER BY COALESCE((SELECT s.signed_at_ms FROM audit_signed_heads s
                                WHERE s.workspace_id = w.id ORDER BY s.seq DESC LIMIT 1), 0),
                      w.id
             LIMIT $1 OFFSET $2",
        )
        .bind(i64::from(limit))
        .bind(i64::from(offset))
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, seq, hash)| (id, AuditHead { seq, hash }))
            .collect())
    }
}
