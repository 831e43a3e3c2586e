//! The audit stream: a workspace's durable log from a sequence on, then its live events, for
//! as long as the token may read them.
//!
//! # A stream ends when its access ends
//! A stream is authorized when it opens and then re-checked; it ends with a last comment saying
//! why (`: access revoked`, `: token expired`, `: access denied`), and a reconnection gets the
//! 401 or 403 any request would. Four things end it, the first three exact, the policy bounded:
//!
//! - **Its grant on the workspace is revoked** (`DELETE .../access-tokens/{id}` or `cpctl tokens
//!   revoke`, also when that revokes the token entirely): the revocation's own audit event,
//!   `token.workspace_access_revoked` naming the token, is written in the same transaction in
//!   *this* workspace, so it takes a place in the very sequence the stream follows. The stream
//!   stops at it: it and every later event are not sent (a check that reads the token after the
//!   revocation ends the stream as well, perhaps a few events earlier). No new signal is
//!   needed: that event reaches every replica the way all audit events do (the change feed:
//!   Postgres NOTIFY, in process on SQLite, and the feed's once-a-second poll for `cpctl` on
//!   SQLite), with the ordering for free. A `Change::AccessChanged` announcement on a topic of
//!   its own would cost every replica one more listening connection and would still race the
//!   events' own announcements, so it could not say which events came before the revocation.
//! - **It expires**: a timer ends it at `expires_at`, and no event is sent at or after that
//!   instant (the stream checks the clock before each).
//! - **Anything else that makes authenticating with the token fail** (its user disabled, a
//!   revocation that writes no event in this workspace, an `expires_at` brought forward, the
//!   grace of a secret a rotation replaced ending): exact as well, by the check below. No event
//!   committed after such a change reaches the stream, replaying or following.
//! - **The active policy now denies it**: bounded by the reload's propagation. After this
//!   process reloads its policies (on an activation's announcement: Postgres NOTIFY from any
//!   replica, in process on SQLite, the change feed's once-a-second poll for a `cpctl`
//!   activation on SQLite; then the new component's compilation), the stream asks the new
//!   authorizer before it sends anything more. Events committed between the activation's
//!   commit and the end of this process's reload may still be sent under the old policy.
//!
//! # The check
//! A check reads the workspace's head sequence, *then* re-reads the token as authentication
//! does (`find_credential`, which sees the user's state, a revocation, the expiry and a
//! rotation's grace), then re-asks the authorizer. A check that passes records that head as
//! *verified*. The stream sends an event only when its sequence is at or below the verified
//! head, and checks first otherwise; it also checks before an event when [`RECHECK`] has passed
//! since the last check or this process's policies were reloaded, and while it waits for live
//! events, every [`RECHECK`]. So it is the same schedule whether it replays or follows: a
//! reader far behind the head (a small receive window, a slow drain) is cut off within
//! [`RECHECK`] of the change, plus the time it takes to read what is already in its socket.
//!
//! Why that is exact: both reads go to the records store (the token's through its read pool,
//! on the primary), never the read replica the replay reads, so the head is at least as fresh
//! as every event the stream holds. An event committed after the change has its sequence given
//! after that commit (in the transaction on SQLite; by the numbering pass that runs after the
//! commit on Postgres, `throughput/event_numbering.rs`, whose passes of a workspace run one at
//! a time and number upwards). A check whose token read still saw the token live read its head
//! before that, so the head it records is below the event's sequence, and the event waits for a
//! later check, which sees the change and ends the stream. The grant-revocation event itself,
//! written with the change, is never sent either.
//!
//! What it costs: a check is one indexed read of the token (`tokens.public_id`) and one
//! decision (~7 µs for the built-in policy), the cost of one authenticated request, plus one
//! indexed one-row read of the head (`audit_events (workspace_id, seq)`) when the stream holds
//! an event above its verified head. A stream makes one a second while it replays events below
//! its verified head or waits for new ones (a thousand idle streams: a thousand reads a
//! second, as before). A follower checks again, with the head, for each burst
//! of new events, but at most once per [`COALESCE`] (50 ms), holding the burst's first event
//! until the window since its last check is over: while a workspace gets events continuously,
//! each follower costs at most 20 checks (40 indexed reads, ~0.14 ms of policy time) a second,
//! and its events reach it up to 50 ms later than they would unchecked (an event after a quiet
//! spell waits only for the two reads). A thousand followers of busy workspaces cost at most
//! 40,000 indexed reads a second, on the replica that holds them.
//!
//! A check whose reads fail (the store unavailable) verifies nothing: the stream goes on
//! sending what was verified (committed before a check that passed), holds anything later, and
//! tries again every [`RECHECK`].
//!
//! # What it carries
//! The events a token may read (`service/activity.rs`: a token limited to some environments
//! reads none tied to others), of the types asked for; skipped ones move the stream's place
//! on all the same, so a resumed stream does not see them either.
//!
//! # A stream is bounded
//! - **How many**: a stream holds a permit from `stream_permits` while it is open; the token's
//!   cap and the workspace's refuse the next one with a 429, this process's with a 503.
//! - **How long**: at its maximum age the stream ends with `: max age reached; reconnect with
//!   Last-Event-ID`, before an event rather than in the middle of one, so a client that
//!   reconnects with the id of the last event it got misses nothing and gets nothing twice.
//! - **How much at once**: the replay reads the durable log a page at a time (the log can hold
//!   millions of events), and the next page only once the last one is sent, so a stream holds
//!   at most one page plus the live events the broadcast buffers for it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::Stream;
use tokio::sync::{broadcast, watch};
use uuid::Uuid;

use super::tokens::GRANT_REVOKED;
use super::{Operation, ServiceError, Services, StreamPermit};
use crate::domain::{AuditEvent, FieldError, Principal, ValidationErrors, parse_sequence};

/// How often an open stream re-checks its token and authorization, replaying or following,
/// when no new event makes it check sooner.
pub const RECHECK: Duration = Duration::from_secs(1);

/// The least time between two checks a stream makes for new events: a follower of a busy
/// workspace checks once per window for all the events committed meanwhile (module doc).
pub const COALESCE: Duration = Duration::from_millis(50);

/// Why the server ended a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The token's grant on the workspace, or the token, was revoked.
    AccessRevoked,
    /// The token expired.
    TokenExpired,
    /// The authorizer no longer allows the token to read the stream.
    AccessDenied,
    /// The stream reached its maximum age; the client reconnects with `Last-Event-ID`.
    MaxAge,
}

impl StreamEnd {
    /// Said in the stream's last comment.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamEnd::AccessRevoked => "access revoked",
            StreamEnd::TokenExpired => "token expired",
            StreamEnd::AccessDenied => "access denied",
            StreamEnd::MaxAge => "max age reached; reconnect with Last-Event-ID",
        }
    }
}

/// One item of a stream: an event, or the reason it ends (always the last item).
#[derive(Debug, Clone)]
pub enum StreamItem {
    Event(Arc<AuditEvent>),
    End(StreamEnd),
}

/// Where a stream starts and which event types it carries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamRequest {
    /// Replay events with a sequence above this; `None`: only events from now on.
    pub after: Option<i64>,
    /// Only these types; empty means all.
    pub types: Vec<String>,
}

/// `types` as the document states it: at most [`StreamRequest::MAX_TYPES`] comma-separated
/// entries of at most [`StreamRequest::MAX_TYPE_CHARS`] characters each (empty ones ignored).
pub const EVENT_TYPES_PATTERN: &str = "^[^,]{0,100}(,[^,]{0,100}){0,49}$";

impl StreamRequest {
    pub const MAX_TYPES: usize = 50;
    pub const MAX_TYPE_CHARS: usize = 100;

    /// `Last-Event-ID` wins over `?after=` (a reconnecting browser sends the header).
    pub fn parse(
        last_event_id: Option<&str>,
        after: Option<&str>,
        types: Option<&str>,
    ) -> Result<Self, ValidationErrors> {
        let parse_seq = |field: &str, raw: &str| {
            parse_sequence(raw)
                .ok_or_else(|| FieldError::new(field, "must be a sequence: 1 to 18 digits"))
        };
        let after = match (last_event_id, after) {
            (Some(raw), _) => Some(parse_seq("Last-Event-ID", raw)?),
            // An empty `after=` is no `after`: only new events (the document says so).
            (None, Some("")) | (None, None) => None,
            (None, Some(raw)) => Some(parse_seq("after", raw)?),
        };
        // Entries are counted and measured as sent, before trimming, as the pattern does.
        let raw: Vec<&str> = types.unwrap_or_default().split(',').collect();
        if raw.len() > Self::MAX_TYPES
            || raw.iter().any(|t| t.chars().count() > Self::MAX_TYPE_CHARS)
        {
            return Err(
                FieldError::new("types", "at most 50 types of at most 100 characters").into(),
            );
        }
        let types = raw
            .into_iter()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        Ok(Self { after, types })
    }
}

/// What the stream re-checks its access with.
struct Access {
    services: Arc<Services>,
    principal: Principal,
    workspace: String,
    workspace_id: Uuid,
    policy_reloads: watch::Receiver<u64>,
    /// The workspace's head sequence read before the token at the last check that passed
    /// (0 before the first): every event up to it was committed before that check saw the
    /// token still live, so it may be sent; a later one waits for a later check.
    verified: i64,
    /// When the last check started, and when the next is due whatever the stream does.
    checked_at: tokio::time::Instant,
    due: tokio::time::Instant,
}

/// What a check found.
enum Checked {
    /// Still allowed; events up to [`Access::verified`] may be sent.
    Live,
    /// The stream must end.
    End(StreamEnd),
    /// The store did not answer: nothing new is verified, and the next try is at `due`.
    Failed,
}

impl Access {
    fn expires_at(&self) -> DateTime<Utc> {
        self.principal.expires_at
    }

    /// Does the grant-revocation event `event` name this stream's token?
    fn revoked_by(&self, event: &AuditEvent) -> bool {
        event.event_type == GRANT_REVOKED && event.target_id == self.principal.token_id
    }

    /// Must the stream check before it sends `seq`: an event above the verified head, the
    /// check due, or this process's policies reloaded since the last one?
    fn must_check(&self, seq: i64) -> bool {
        seq > self.verified
            || tokio::time::Instant::now() >= self.due
            || self.policy_reloads.has_changed().unwrap_or(false)
    }

    /// Waits out the rest of [`COALESCE`] after the last check, so that a follower of a busy
    /// workspace checks once per window rather than once per event.
    async fn coalesce(&self) {
        tokio::time::sleep_until(self.checked_at + COALESCE).await;
    }

    /// Reads the workspace's head (when `advance`: the stream holds an event above its verified
    /// head), then re-reads the token as authentication does and re-asks the authorizer. Both
    /// reads go to the records store (`find_credential` reads it too, through its read pool),
    /// never the read replica: the head must be at least as fresh as the token, so that an
    /// event committed after a change the token read did not see has a sequence above the head
    /// recorded (module doc).
    async fn check(&mut self, advance: bool) -> Checked {
        let started = tokio::time::Instant::now();
        self.checked_at = started;
        self.due = started + RECHECK;
        self.policy_reloads.mark_unchanged();
        let mut head = self.verified;
        if advance {
            match self
                .services
                .store
                .list_events(self.workspace_id, None, 1)
                .await
            {
                Ok(newest) => head = newest.first().and_then(|e| e.sequence).unwrap_or(0),
                Err(e) => {
                    tracing::warn!(error = %e, "audit stream cannot read its workspace's head; retrying");
                    return Checked::Failed;
                }
            }
        }
        let token = match self.services.current_token(&self.principal).await {
            Ok(Some(token)) => token,
            Ok(None) => return Checked::End(StreamEnd::AccessRevoked),
            Err(e) => {
                tracing::warn!(error = %e, "audit stream cannot re-check its token; retrying");
                return Checked::Failed;
            }
        };
        let expired = token.token.revoked_at.is_none() && token.token.expires_at <= Services::now();
        let principal = match Services::live_principal(token) {
            Some(principal) if principal.has_workspace(self.workspace_id) => principal,
            _ if expired => return Checked::End(StreamEnd::TokenExpired),
            _ => return Checked::End(StreamEnd::AccessRevoked),
        };
        // Still the stream's request, for the decision log.
        self.principal = Principal {
            correlation_id: self.principal.correlation_id.take(),
            ..principal
        };
        let denied = self
            .services
            .authorize(
                &self.principal,
                Operation::ReadAuditStream,
                Some(&self.workspace),
                vec![],
            )
            .await
            .is_err();
        if denied {
            return Checked::End(StreamEnd::AccessDenied);
        }
        self.verified = self.verified.max(head);
        Checked::Live
    }
}

struct Cursor {
    access: Access,
    /// Where replays are read: the read replica when one serves, else the records store.
    store: Arc<dyn crate::storage::AuditStore>,
    rx: broadcast::Receiver<Arc<AuditEvent>>,
    workspace_id: Uuid,
    /// The newest sequence passed on (or skipped by the filter).
    last: i64,
    backlog: VecDeque<Arc<AuditEvent>>,
    /// Read the durable log before waiting for live events.
    catch_up: bool,
    types: Vec<String>,
    /// Nothing more to send: the stream failed or ended.
    done: bool,
    /// Events per read of the durable log: a replay from `after=0` is read page by page.
    page: u32,
    /// When the stream ends with [`StreamEnd::MaxAge`].
    ends_at: tokio::time::Instant,
    /// Its place under the caps, given back when the stream ends or its body is dropped.
    _permit: StreamPermit,
}

impl Cursor {
    async fn next(&mut self) -> Option<Result<StreamItem, ServiceError>> {
        if self.done {
            return None;
        }
        let item = self.advance().await;
        self.done = !matches!(item, Ok(StreamItem::Event(_)));
        Some(item)
    }

    async fn advance(&mut self) -> Result<StreamItem, ServiceError> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                let seq = event.sequence.unwrap_or_default();
                if seq <= self.last {
                    continue;
                }
                // Before the type filter: the stream ends there whatever it carries.
                if self.access.revoked_by(&event) {
                    return Ok(StreamItem::End(StreamEnd::AccessRevoked));
                }
                if Services::now() >= self.access.expires_at() {
                    return Ok(StreamItem::End(StreamEnd::TokenExpired));
                }
                // Not sent: the client resumes with the id of the last event it got.
                if tokio::time::Instant::now() >= self.ends_at {
                    return Ok(StreamItem::End(StreamEnd::MaxAge));
                }
                let wanted =
                    self.types.is_empty() || self.types.iter().any(|t| *t == event.event_type);
                let send = wanted && super::activity::visible_to(&self.access.principal, &event);
                // Replaying or following alike: an event is sent only once a check that started
                // after its commit found the token live, and never past a check that is due.
                if self.access.must_check(if send { seq } else { 0 }) {
                    let advance = send && seq > self.access.verified;
                    if advance {
                        self.access.coalesce().await;
                    }
                    if let Checked::End(end) = self.access.check(advance).await {
                        return Ok(StreamItem::End(end));
                    }
                    if send && seq > self.access.verified {
                        // The store did not answer: keep the event until a check passes.
                        self.backlog.push_front(event);
                        tokio::select! {
                            () = tokio::time::sleep_until(self.access.due) => {}
                            () = tokio::time::sleep_until(self.ends_at) => {}
                        }
                        continue;
                    }
                }
                // Again after the check's waits, right before the event goes.
                if Services::now() >= self.access.expires_at() {
                    return Ok(StreamItem::End(StreamEnd::TokenExpired));
                }
                self.last = seq;
                if send {
                    return Ok(StreamItem::Event(event));
                }
                continue;
            }
            if self.catch_up {
                // The client resumes from its Last-Event-ID; nothing is skipped.
                let events = self
                    .store
                    .events_after(self.workspace_id, self.last, self.page)
                    .await?;
                // Sequences have no gaps, so one here is retention removing what this stream
                // was about to replay (after the check at its start). Ending it sends the client
                // back with its Last-Event-ID, which is then refused with 410, never skipped.
                if let Some(first) = events.first().and_then(|e| e.sequence)
                    && self.last > 0
                    && first > self.last + 1
                {
                    return Err(ServiceError::CursorExpired { oldest: first });
                }
                self.catch_up = events.len() == self.page as usize;
                self.backlog.extend(events.into_iter().map(Arc::new));
                continue;
            }
            let expiry = (self.access.expires_at() - Services::now())
                .to_std()
                .unwrap_or_default();
            let recheck = tokio::select! {
                received = self.rx.recv() => {
                    match received {
                        Ok(event) => {
                            let seq = event.sequence.unwrap_or_default();
                            if seq == self.last + 1 {
                                self.backlog.push_back(event);
                            } else if seq > self.last + 1 {
                                // A gap (this subscriber joined mid-flight): fill it from the log.
                                self.catch_up = true;
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => self.catch_up = true,
                        Err(broadcast::error::RecvError::Closed) => {
                            return Err(ServiceError::Unavailable);
                        }
                    }
                    false
                }
                () = tokio::time::sleep(expiry) => {
                    if Services::now() >= self.access.expires_at() {
                        return Ok(StreamItem::End(StreamEnd::TokenExpired));
                    }
                    false
                }
                () = tokio::time::sleep_until(self.ends_at) => {
                    return Ok(StreamItem::End(StreamEnd::MaxAge));
                }
                () = tokio::time::sleep_until(self.access.due) => true,
                changed = self.access.policy_reloads.changed() => changed.is_ok(),
            };
            if recheck && let Checked::End(end) = self.access.check(false).await {
                return Ok(StreamItem::End(end));
            }
        }
    }
}

impl Services {
    /// The workspace's audit events after `request.after` from the durable log, then live,
    /// gapless and without duplicates at the seam.
    /// It ends, after a last [`StreamItem::End`], when the token loses access (module doc) or
    /// at its maximum age. Refused with [`ServiceError::StreamCapReached`] when the token, the
    /// workspace or this process holds as many streams as it may (`stream_permits`).
    pub async fn audit_stream(
        self: &Arc<Self>,
        principal: &Principal,
        workspace: &str,
        request: StreamRequest,
    ) -> Result<impl Stream<Item = Result<StreamItem, ServiceError>> + Send + 'static, ServiceError>
    {
        self.authorize(
            principal,
            Operation::ReadAuditStream,
            Some(workspace),
            vec![],
        )
        .await?;
        let workspace_id = crate::domain::parse_uuid(workspace)
            .ok_or_else(|| ServiceError::forbidden("no access"))?;
        // A resumed stream whose next events retention removed is refused, not given a gap;
        // `after=0` (the whole log) starts at the oldest event kept.
        if let Some(after) = request.after.filter(|after| *after > 0) {
            self.check_not_expired(workspace_id, after + 1).await?;
        }
        // After authorization, so a caller without access is told so rather than to wait.
        let permit = self
            .stream_permits
            .acquire(principal.token_id, workspace_id, principal.organisation_id)
            .map_err(ServiceError::StreamCapReached)?;
        let limits = *self.stream_permits.limits();
        // Subscribe first, then read the log: an event committed in between is in one or both,
        // and the cursor drops what it has already passed on.
        let (rx, head) = self.feed.subscribe(workspace_id).await?;
        let mut policy_reloads = self.policy_reloads.subscribe();
        policy_reloads.mark_unchanged();
        let now = tokio::time::Instant::now();
        // A maximum age too large to add ends never (a century is never).
        let ends_at = now
            .checked_add(limits.max_age)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
        let cursor = Cursor {
            access: Access {
                services: self.clone(),
                principal: principal.clone(),
                workspace: workspace.to_owned(),
                workspace_id,
                policy_reloads,
                // Nothing verified yet: the first event to send waits for a check.
                verified: 0,
                checked_at: now.checked_sub(COALESCE).unwrap_or(now),
                due: now + RECHECK,
            },
            store: self.reads.clone(),
            rx,
            workspace_id,
            last: request.after.unwrap_or(head),
            backlog: VecDeque::new(),
            catch_up: true,
            types: request.types,
            done: false,
            page: limits.replay_page.max(1),
            ends_at,
            _permit: permit,
        };
        Ok(futures_util::stream::unfold(
            cursor,
            |mut cursor| async move { cursor.next().await.map(|item| (item, cursor)) },
        ))
    }

    /// Subscribers of the audit stream in this process.
    pub fn audit_subscribers(&self) -> usize {
        self.feed.subscribers()
    }

    /// Audit streams open in this process (holding a permit).
    pub fn audit_streams_open(&self) -> u32 {
        self.stream_permits.open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pattern the document gives `types` is the parser's rule, with its constants.
    #[test]
    fn the_types_pattern_states_the_limits() {
        let (n, c) = (StreamRequest::MAX_TYPES, StreamRequest::MAX_TYPE_CHARS);
        let expected = format!("^[^,]{{0,{c}}}(,[^,]{{0,{c}}}){{0,{}}}$", n - 1);
        assert_eq!(EVENT_TYPES_PATTERN, expected);
        let types = |raw: &str| StreamRequest::parse(None, None, Some(raw)).map(|r| r.types);
        let many = vec!["a"; n].join(",");
        assert_eq!(types(&many).map(|t| t.len()), Ok(n));
        assert!(types(&format!("{many},a")).is_err());
        // Empty entries count, as the pattern counts them, and are then ignored.
        assert!(types(&",".repeat(n)).is_err());
        assert_eq!(types(" a , ,b"), Ok(vec!["a".to_owned(), "b".to_owned()]));
        assert!(types(&"é".repeat(c)).is_ok());
        assert!(types(&"é".repeat(c + 1)).is_err());
    }

    #[test]
    fn after_and_last_event_id_are_sequences() {
        let after = |id: Option<&str>, raw: Option<&str>| {
            StreamRequest::parse(id, raw, None).map(|r| r.after)
        };
        assert_eq!(after(None, Some("")), Ok(None));
        assert_eq!(after(None, Some("0")), Ok(Some(0)));
        assert_eq!(after(Some("7"), Some("3")), Ok(Some(7)));
        for bad in ["-1", "+1", " 1", "abc", "9999999999999999999"] {
            assert!(after(None, Some(bad)).is_err(), "{bad:?}");
            assert!(after(Some(bad), None).is_err(), "{bad:?}");
        }
    }
}
