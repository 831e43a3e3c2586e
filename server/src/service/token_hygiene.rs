//! Token hygiene: what an administrator needs to find tokens to retire.
//!
//! # Last use, coalesced
//! Each token's last use (time, client address, user agent) is recorded without a write per
//! request and off the request's path. After a successful authentication the HTTP layer calls
//! [`LastUseRecorder::observe`], which is synchronous and never waits: a token this process
//! saw within the window ([`LAST_USE_WINDOW`]) is ignored at once, from a small in-process map;
//! any other use is offered to a [`BatchQueue`] (a full queue drops the use, never blocks the
//! request). The queue's writer, one per process, asks fast state for each use
//! for the token's claim of the window (`UseClaims`, Redis `SET NX PX`, shared by every
//! replica), and only the uses whose claim it won are written, together, in one transaction
//! (`record_last_uses`). So a token is written at most once a window across replicas while
//! fast state answers; when it does not, each replica still writes it at most once a window
//! (its own map), rather than lose the record. Every row written counts in
//! `token_last_used_writes_total` on `/metrics`.
//!
//! The user agent is bounded ([`USER_AGENT_MAX`] characters, control characters dropped); it
//! is stored and shown by `cpctl`, never logged.
//!
//! # Expiry notice
//! [`Services::notice_expiring_tokens`] gives each live token whose expiry is within the
//! notice span one `token.expiring` event in every workspace it still has access to. The
//! store claims the tokens with a conditional update of `expiry_notice_at` in the events'
//! transaction, so replicas running the same pass give each notice once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::IntCounter;
use serde_json::json;
use uuid::Uuid;

use super::batch_queue::{BatchQueue, BatchWriter, QueueShape};
use super::{ServiceError, Services};
use crate::domain::{Actor, NewAuditEvent, Span, TOKEN_PREFIX, Timestamp};
use crate::storage::{
    ExpiringTokens, LastUseWrite, SharedRecordStore, TokenFilter, TokenRecord, TokenUse, UseClaims,
    WriteContext, keys,
};

/// A token's last use is written at most once in this long.
pub const LAST_USE_WINDOW: Duration = Duration::from_secs(60);
/// The user agent kept with a last use, in characters.
pub const USER_AGENT_MAX: usize = 256;
/// Up to 1,024 uses wait for the writer, 256 are written in one transaction.
const QUEUE: QueueShape = QueueShape {
    capacity: 1024,
    batch: 256,
    tick: None,
};
/// Tokens remembered by the in-process map before its expired entries are swept.
const REMEMBERED: usize = 50_000;
/// Tokens given their expiry notice in one transaction at most.
const NOTICE_BATCH: i64 = 200;

/// The event each workspace of a token near its expiry gets.
pub const TOKEN_EXPIRING: &str = "token.expiring";

/// The user agent as stored: control characters dropped, at most [`USER_AGENT_MAX`]
/// characters, `None` when nothing is left.
pub fn bounded_user_agent(raw: &str) -> Option<String> {
    let kept: String = raw
        .chars()
        .filter(|c| !c.is_control())
        .take(USER_AGENT_MAX)
        .collect();
    let kept = kept.trim();
    (!kept.is_empty()).then(|| kept.to_owned())
}

/// Records tokens' last uses in the background (see the module documentation).
pub struct LastUseRecorder {
    queue: BatchQueue<LastUseWrite>,
    /// When this process last queued each token's use.
    recent: Mutex<HashMap<Uuid, Instant>>,
    window: Duration,
    writes: IntCounter,
    dropped: IntCounter,
}

impl LastUseRecorder {
    /// Starts the writer task. `key_prefix` isolates one deployment's claims.
    pub fn start(
        store: SharedRecordStore,
        claims: Arc<dyn UseClaims>,
        key_prefix: String,
    ) -> Result<Arc<Self>, prometheus::Error> {
        let writes = IntCounter::new(
            "token_last_used_writes_total",
            "Tokens whose last use this process wrote to the records store",
        )?;
        let dropped = IntCounter::new(
            "token_last_used_dropped_total",
            "Token uses not recorded because the last-use queue was full",
        )?;
        let writer = Writer {
            store,
            claims,
            key_prefix,
            window: LAST_USE_WINDOW,
            writes: writes.clone(),
        };
        let queue = BatchQueue::start(QUEUE, dropped.clone(), writer);
        Ok(Arc::new(Self {
            queue,
            recent: Mutex::default(),
            window: LAST_USE_WINDOW,
            writes,
            dropped,
        }))
    }

    /// The counters to publish on `/metrics`.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.writes.clone()),
            Box::new(self.dropped.clone()),
        ]
    }

    /// Notes a successful authentication with `token_id`. Never waits and never fails: at
    /// worst the use is not recorded.
    pub fn observe(&self, token_id: Uuid, address: &str, user_agent: Option<&str>) {
        let now = Instant::now();
        {
            let Ok(mut recent) = self.recent.lock() else {
                return;
            };
            if recent
                .get(&token_id)
                .is_some_and(|at| now.duration_since(*at) < self.window)
            {
                return;
            }
            if recent.len() >= REMEMBERED {
                recent.retain(|_, at| now.duration_since(*at) < self.window);
            }
            recent.insert(token_id, now);
        }
        let used = LastUseWrite {
            token_id,
            used: TokenUse {
                at: Services::now(),
                address: address.to_owned(),
                user_agent: user_agent.and_then(bounded_user_agent),
            },
        };
        self.queue.offer(used);
    }
}

/// The task that claims and writes queued uses.
struct Writer {
    store: SharedRecordStore,
    claims: Arc<dyn UseClaims>,
    key_prefix: String,
    window: Duration,
    writes: IntCounter,
}

#[async_trait::async_trait]
impl BatchWriter<LastUseWrite> for Writer {
    async fn write(&mut self, batch: &mut Vec<LastUseWrite>) {
        let mut won = Vec::with_capacity(batch.len());
        for used in batch.drain(..) {
            let key = keys::token_last_use(&self.key_prefix, used.token_id);
            match self.claims.claim_window(&key, self.window).await {
                Ok(true) => won.push(used),
                Ok(false) => {}
                Err(e) => {
                    // Written all the same: this process's map still bounds it to once a
                    // window per replica.
                    tracing::debug!(error = %e, "last-use claim unavailable; writing unclaimed");
                    won.push(used);
                }
            }
        }
        if won.is_empty() {
            return;
        }
        match self
            .store
            .record_last_uses(&WriteContext::system(), &won)
            .await
        {
            Ok(written) => self.writes.inc_by(written),
            Err(e) => {
                tracing::warn!(error = %e, tokens = won.len(), "could not record tokens' last use")
            }
        }
    }
}

/// Which tokens a listing asks for (`cpctl tokens list`); every filter narrows it.
#[derive(Debug, Clone, Default)]
pub struct TokenListing {
    pub user_id: Option<Uuid>,
    pub workspace_id: Option<Uuid>,
    /// Live tokens expiring within this span from now.
    pub expiring_within: Option<Span>,
    /// Live tokens not used for this span: last used longer ago, or never used and issued
    /// longer ago.
    pub unused_for: Option<Span>,
}

impl TokenListing {
    /// The store's filter for this listing at `now`.
    pub(super) fn filter(&self, now: chrono::DateTime<chrono::Utc>) -> TokenFilter {
        let timed = self.expiring_within.is_some() || self.unused_for.is_some();
        TokenFilter {
            user_id: self.user_id,
            workspace_id: self.workspace_id,
            live_at: timed.then_some(now),
            expires_by: self.expiring_within.map(|span| now + span.duration()),
            unused_since: self.unused_for.map(|span| now - span.duration()),
            ..TokenFilter::default()
        }
    }
}

impl Services {
    /// The tokens `listing` selects, oldest first; the store does the filtering. Either time
    /// filter leaves out revoked and expired tokens: they need no more hygiene.
    pub async fn list_tokens_where(
        &self,
        listing: &TokenListing,
    ) -> Result<Vec<TokenRecord>, ServiceError> {
        let filter = listing.filter(Self::now());
        Ok(self.store.list_tokens(&filter).await?)
    }

    /// Gives every live token expiring within `notice` its `token.expiring` events, once, a
    /// batch at a time. Returns how many tokens were noticed and whether more may be due.
    pub async fn notice_expiring_tokens(
        &self,
        notice: Span,
    ) -> Result<(usize, bool), ServiceError> {
        if notice.is_zero() {
            return Ok((0, false));
        }
        let now = Self::now();
        let write = WriteContext::system();
        let due = ExpiringTokens {
            now,
            until: now + notice.duration(),
            limit: NOTICE_BATCH,
        };
        let (actor, correlation_id) = (write.actor(), write.correlation_id().to_string());
        let events = move |token: &TokenRecord| expiring_events(token, actor, &correlation_id, now);
        let noticed = self
            .store
            .notice_expiring_tokens(&write, due, &events)
            .await?;
        if noticed > 0 {
            tracing::info!(tokens = noticed, "token expiry notices written");
        }
        Ok((noticed, noticed as i64 == NOTICE_BATCH))
    }
}

/// One `token.expiring` event per workspace the token still has access to. It names the token
/// (id, name, public prefix, expiry), never its secret.
fn expiring_events(
    token: &TokenRecord,
    actor: Actor,
    correlation_id: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<NewAuditEvent> {
    token
        .workspace_ids
        .iter()
        .map(|ws| NewAuditEvent {
            organisation_id: token.organisation_id,
            workspace_id: Some(*ws),
            event_type: TOKEN_EXPIRING,
            actor,
            target_kind: "token",
            target_id: token.id,
            correlation_id: correlation_id.to_owned(),
            occurred_at: now,
            data: json!({
                "tokenId": token.id,
                "name": token.name,
                "prefix": format!("{TOKEN_PREFIX}{}", token.public_id),
                "ownerId": token.user_id,
                "expiresAt": Timestamp::new(token.expires_at),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_agent_is_bounded_and_loses_its_control_characters() {
        assert_eq!(bounded_user_agent("curl/8.5"), Some("curl/8.5".into()));
        assert_eq!(bounded_user_agent("a\nb\tc\u{7f}"), Some("abc".into()));
        assert_eq!(bounded_user_agent(" \r\n"), None);
        let long = "é".repeat(USER_AGENT_MAX + 10);
        let kept = bounded_user_agent(&long).unwrap();
        assert_eq!(kept.chars().count(), USER_AGENT_MAX);
    }
}
