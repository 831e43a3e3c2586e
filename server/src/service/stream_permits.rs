//! How many audit streams may be open at once, and for how long.
//!
//! Each open stream holds a [`StreamPermit`], taken when it is authorized and released when it
//! is dropped: when the stream ends, or when the response body is dropped because the client
//! went away. The server notices that only when a write fails (the HTTP server does not watch
//! an idle client's socket), so at the latest two heartbeats after a silent disconnect. A permit counts against four caps at once, checked and taken under one lock:
//! the token's, the workspace's and the organisation's (a refusal is a 429 `rate_limited`) and
//! this process's (a 503 `unavailable`: the server is full, not the caller greedy). The
//! organisation's cap (a quarter of the process's by default) keeps one tenant's many tokens and
//! workspaces from taking every slot of the process.
//!
//! The counts live in this process. With several replicas each one counts its own streams, so a
//! token may hold up to its cap on every replica. A lease in Redis would make the caps global,
//! but a replica that dies holding leases would keep them until they expire, so every stream
//! would have to renew its lease, and every open would need Redis up; the caps exist to bound
//! what one process holds (connections, memory, log reads), which the local count does exactly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use uuid::Uuid;

/// How long a refused client is told to wait (`retry-after`): a concurrency cap frees up when
/// some stream ends, which no one can predict, so a short fixed delay.
pub const STREAM_RETRY_AFTER: Duration = Duration::from_secs(5);

/// The caps on open audit streams, and their lifetime; each has a configuration flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    pub per_token: u32,
    pub per_workspace: u32,
    pub per_organisation: u32,
    pub per_process: u32,
    /// A stream ends cleanly this long after it opened; the client resumes with
    /// `Last-Event-ID`.
    pub max_age: Duration,
    /// Events read from the durable log per query when replaying.
    pub replay_page: u32,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            per_token: 8,
            per_workspace: 64,
            per_organisation: 256,
            per_process: 1024,
            max_age: Duration::from_secs(3600),
            replay_page: 500,
        }
    }
}

/// Which cap refused a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamScope {
    Token,
    Workspace,
    Organisation,
    Process,
}

impl StreamScope {
    pub fn as_str(self) -> &'static str {
        match self {
            StreamScope::Token => "token",
            StreamScope::Workspace => "workspace",
            StreamScope::Organisation => "organisation",
            StreamScope::Process => "process",
        }
    }
}

/// A refusal: the cap that was full and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCapReached {
    pub scope: StreamScope,
    pub limit: u32,
}

#[derive(Debug, Default)]
struct Open {
    total: u32,
    tokens: HashMap<Uuid, u32>,
    workspaces: HashMap<Uuid, u32>,
    organisations: HashMap<Uuid, u32>,
}

/// The open streams of this process.
#[derive(Debug)]
pub struct StreamPermits {
    limits: StreamLimits,
    open: Mutex<Open>,
}

impl StreamPermits {
    pub fn new(limits: StreamLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: Mutex::new(Open::default()),
        })
    }

    pub fn limits(&self) -> &StreamLimits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // Only counters behind it, each update complete before anything can panic.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A permit for one more stream of `token` on `workspace` of `organisation`, or the first
    /// full cap: the token's, the workspace's, the organisation's, then the process's.
    pub fn acquire(
        self: &Arc<Self>,
        token: Uuid,
        workspace: Uuid,
        organisation: Uuid,
    ) -> Result<StreamPermit, StreamCapReached> {
        let mut open = self.lock();
        let refuse = |scope, limit| Err(StreamCapReached { scope, limit });
        if open.tokens.get(&token).copied().unwrap_or(0) >= self.limits.per_token {
            return refuse(StreamScope::Token, self.limits.per_token);
        }
        if open.workspaces.get(&workspace).copied().unwrap_or(0) >= self.limits.per_workspace {
            return refuse(StreamScope::Workspace, self.limits.per_workspace);
        }
        if open.organisations.get(&organisation).copied().unwrap_or(0)
            >= self.limits.per_organisation
        {
            return refuse(StreamScope::Organisation, self.limits.per_organisation);
        }
        if open.total >= self.limits.per_process {
            return refuse(StreamScope::Process, self.limits.per_process);
        }
        open.total += 1;
        *open.tokens.entry(token).or_default() += 1;
        *open.workspaces.entry(workspace).or_default() += 1;
        *open.organisations.entry(organisation).or_default() += 1;
        Ok(StreamPermit {
            permits: self.clone(),
            token,
            workspace,
            organisation,
        })
    }

    /// Streams open in this process.
    pub fn open(&self) -> u32 {
        self.lock().total
    }

    fn release(&self, permit: &StreamPermit) {
        let mut open = self.lock();
        open.total = open.total.saturating_sub(1);
        decrement(&mut open.tokens, permit.token);
        decrement(&mut open.workspaces, permit.workspace);
        decrement(&mut open.organisations, permit.organisation);
    }
}

/// Drops the entry at zero, so the maps hold only keys with open streams.
fn decrement(counts: &mut HashMap<Uuid, u32>, key: Uuid) {
    if let Some(n) = counts.get_mut(&key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(&key);
        }
    }
}

/// One open stream's place under the caps, given back when dropped.
#[derive(Debug)]
pub struct StreamPermit {
    permits: Arc<StreamPermits>,
    token: Uuid,
    workspace: Uuid,
    organisation: Uuid,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        self.permits.release(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One organisation for the tests of the other caps (its own cap is far above theirs).
    const ORG: Uuid = Uuid::nil();

    fn permits(per_token: u32, per_workspace: u32, per_process: u32) -> Arc<StreamPermits> {
        StreamPermits::new(StreamLimits {
            per_token,
            per_workspace,
            per_process,
            ..StreamLimits::default()
        })
    }

    #[test]
    fn an_organisation_holds_at_most_its_cap_whatever_its_tokens_and_workspaces() {
        let p = StreamPermits::new(StreamLimits {
            per_organisation: 2,
            ..StreamLimits::default()
        });
        let (busy, quiet) = (Uuid::new_v4(), Uuid::new_v4());
        let first = p.acquire(Uuid::new_v4(), Uuid::new_v4(), busy).unwrap();
        let _second = p.acquire(Uuid::new_v4(), Uuid::new_v4(), busy).unwrap();
        let full = p.acquire(Uuid::new_v4(), Uuid::new_v4(), busy).unwrap_err();
        assert_eq!(
            full,
            StreamCapReached {
                scope: StreamScope::Organisation,
                limit: 2
            }
        );
        let _other = p.acquire(Uuid::new_v4(), Uuid::new_v4(), quiet).unwrap();
        drop(first);
        let _again = p.acquire(Uuid::new_v4(), Uuid::new_v4(), busy).unwrap();
    }

    #[test]
    fn each_cap_refuses_the_next_stream_until_one_is_released() {
        let p = permits(2, 3, 4);
        let (t1, t2, t3) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let (w1, w2) = (Uuid::new_v4(), Uuid::new_v4());

        let a = p.acquire(t1, w1, ORG).unwrap();
        let _b = p.acquire(t1, w1, ORG).unwrap();
        let token_full = p.acquire(t1, w2, ORG).unwrap_err();
        assert_eq!(token_full.scope, StreamScope::Token);
        assert_eq!(token_full.limit, 2);

        let c = p.acquire(t2, w1, ORG).unwrap();
        let workspace_full = p.acquire(t3, w1, ORG).unwrap_err();
        assert_eq!(workspace_full.scope, StreamScope::Workspace);

        let _d = p.acquire(t2, w2, ORG).unwrap();
        assert_eq!(p.open(), 4);
        let process_full = p.acquire(t3, w2, ORG).unwrap_err();
        assert_eq!(
            process_full,
            StreamCapReached {
                scope: StreamScope::Process,
                limit: 4
            }
        );

        drop(c);
        assert_eq!(p.open(), 3);
        let _e = p.acquire(t3, w2, ORG).unwrap();
        drop(a);
        let _f = p.acquire(t1, w2, ORG).unwrap();
    }

    #[test]
    fn released_permits_leave_no_entries_behind() {
        let p = permits(8, 64, 1024);
        let permits: Vec<_> = (0..10)
            .map(|_| p.acquire(Uuid::new_v4(), Uuid::new_v4(), ORG).unwrap())
            .collect();
        assert_eq!(p.open(), 10);
        drop(permits);
        let open = p.lock();
        assert_eq!(open.total, 0);
        assert!(open.tokens.is_empty() && open.workspaces.is_empty());
        assert!(open.organisations.is_empty());
    }
}
