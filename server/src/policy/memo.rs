//! The built-in authorizer's allows, remembered. That policy (`policies/authz`) is a function
//! of its request alone: no clock, no randomness, no state between decisions. So an allow it
//! gave is the allow it would give again to any request that agrees with it on what it reads.
//!
//! The key is exactly what it reads ([`MemoKey`]): the operation, the principal's role, scopes
//! and workspaces, the path's workspace id in the form the policy compares (lower case), and
//! whether an admin route's organisation is the principal's own (not the id itself). Not
//! the token id, the route or the other path ids (a token or pool id named in the path): the
//! policy never reads them, and keying on them let any caller mint new keys at will (random
//! token ids on `DELETE .../access-tokens/{id}`, case variants of a workspace id). A path
//! workspace the policy allows is one of the principal's own grants, so every id in a key is
//! one that resolves. Denials are not kept: their inputs are the caller's to vary.
//!
//! The memo is split by organisation: each has a share of [`SHARE_BYTES`], emptied when full,
//! and at most [`MAX_SHARES`] organisations hold one (a new one takes the place of the one used
//! least recently), so one tenant flooding the memo empties only its own share and the whole
//! stays under `SHARE_BYTES * MAX_SHARES`. Installed policies are never remembered; nothing
//! says they are pure (docs/decisions.md, "The built-in authorizer's memo: its key and a share
//! per organisation").

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::wit::authz_types::{AuthzRequest, Role};

/// What one organisation's remembered requests may hold, counted as their strings' bytes. A
/// key is a few hundred bytes for a token of a few workspaces, so this is hundreds of keys.
pub(super) const SHARE_BYTES: usize = 128 << 10;
/// Organisations holding a share at once: 8 MiB in all.
pub(super) const MAX_SHARES: usize = 64;

/// What the built-in authorizer reads of a request, canonical: two requests with equal keys
/// get the same decision. `policies/authz` reads nothing else; a change to it that does must
/// add it here (`the_built_in_authorizer_reads_nothing_the_memo_key_leaves_out` checks it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct MemoKey {
    operation: String,
    /// The path's workspace as the policy compares it: lower case.
    workspace: Option<String>,
    /// Sorted, without duplicates: the policy asks only whether one is there.
    scopes: Vec<String>,
    workspaces: Vec<String>,
    role: Role,
    /// For a route naming an organisation: whether it is the principal's own, as the policy
    /// compares it (a canonical id, case-blind). Only that is read, so an operator varying the
    /// id mints no new key.
    own_organisation: Option<bool>,
}

impl MemoKey {
    /// `None` for a request the memo never answers: a path workspace the policy refuses
    /// outright (not 36 ASCII characters), or one that is none of the principal's grants.
    fn of(request: &AuthzRequest) -> Option<Self> {
        let p = &request.principal;
        let workspace = match &request.workspace_id {
            None => None,
            Some(w) if w.len() == 36 && w.is_ascii() => {
                let w = w.to_ascii_lowercase();
                if !p.workspace_ids.contains(&w) {
                    return None;
                }
                Some(w)
            }
            Some(_) => return None,
        };
        let sorted = |list: &[String]| {
            let mut list = list.to_vec();
            list.sort_unstable();
            list.dedup();
            list
        };
        let own_organisation = request
            .resource_ids
            .iter()
            .find(|(name, _)| name == "organisationId")
            .map(|(_, id)| {
                id.len() == 36 && id.is_ascii() && id.to_ascii_lowercase() == p.organisation_id
            });
        Some(Self {
            operation: request.operation.clone(),
            workspace,
            scopes: sorted(&p.scopes),
            workspaces: sorted(&p.workspace_ids),
            role: p.role,
            own_organisation,
        })
    }

    /// The bytes its strings hold, plus a fixed share for the containers.
    fn weight(&self) -> usize {
        let list = |l: &[String]| l.iter().map(|s| s.len() + 24).sum::<usize>();
        136 + self.operation.len()
            + self.workspace.as_ref().map_or(0, String::len)
            + list(&self.scopes)
            + list(&self.workspaces)
    }
}

#[derive(Debug)]
pub(super) struct AllowMemo {
    inner: Mutex<Inner>,
    share_bytes: usize,
    max_shares: usize,
}

#[derive(Debug, Default)]
struct Inner {
    /// By organisation id.
    shares: HashMap<String, Share>,
    /// Counts lookups and insertions: a share's `used` is the count when it was last touched.
    clock: u64,
}

#[derive(Debug, Default)]
struct Share {
    allowed: HashSet<MemoKey>,
    bytes: usize,
    used: u64,
}

impl AllowMemo {
    pub(super) fn new(share_bytes: usize, max_shares: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            share_bytes,
            max_shares,
        }
    }

    /// Whether a request agreeing with `request` on everything the policy reads was allowed.
    pub(super) fn allows(&self, request: &AuthzRequest) -> bool {
        let Some(key) = MemoKey::of(request) else {
            return false;
        };
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        inner.clock += 1;
        let now = inner.clock;
        match inner.shares.get_mut(&request.principal.organisation_id) {
            Some(share) if share.allowed.contains(&key) => {
                share.used = now;
                true
            }
            _ => false,
        }
    }

    /// Remembers that `request` was allowed, in its organisation's share; a share that would
    /// pass its budget is emptied first (no recency bookkeeping per key: the hot keys return
    /// at once), and a new organisation past the count takes the least recently used share.
    pub(super) fn remember(&self, request: &AuthzRequest) {
        let Some(key) = MemoKey::of(request) else {
            return;
        };
        let size = key.weight();
        if size > self.share_bytes || self.max_shares == 0 {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.clock += 1;
        let now = inner.clock;
        let organisation = &request.principal.organisation_id;
        if !inner.shares.contains_key(organisation) && inner.shares.len() >= self.max_shares {
            let stalest = inner
                .shares
                .iter()
                .min_by_key(|(_, share)| share.used)
                .map(|(org, _)| org.clone());
            if let Some(stalest) = stalest {
                inner.shares.remove(&stalest);
            }
        }
        let share = inner.shares.entry(organisation.clone()).or_default();
        share.used = now;
        if share.allowed.contains(&key) {
            return;
        }
        if share.bytes + size > self.share_bytes {
            share.allowed.clear();
            share.bytes = 0;
        }
        share.allowed.insert(key);
        share.bytes += size;
    }

    /// Keys remembered, in all shares.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner
            .lock()
            .map(|i| i.shares.values().map(|s| s.allowed.len()).sum())
            .unwrap_or(0)
    }

    /// Keys remembered in `organisation`'s share.
    #[cfg(test)]
    pub(super) fn len_of(&self, organisation: &str) -> usize {
        self.inner
            .lock()
            .map(|i| i.shares.get(organisation).map_or(0, |s| s.allowed.len()))
            .unwrap_or(0)
    }

    /// The bytes all shares hold.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.inner
            .lock()
            .map(|i| i.shares.values().map(|s| s.bytes).sum())
            .unwrap_or(0)
    }
}
