//! The built-in authorizer's allows, remembered. That policy (`policies/authz`) is a function
//! of its request alone: no clock, no randomness, no state between decisions. So an allow it
//! gave is the allow it would give again to the same request, byte for byte, and the request
//! is the whole key: a token whose scopes or workspaces differ, another token, another route
//! or another workspace in the path are other keys, and a revoked token never reaches the
//! policy. Denials are not kept: their inputs are the caller's to vary (any workspace id in a
//! path), and a flood of them would only push out allows. Installed policies are never
//! remembered; nothing says they are pure. The memo is bounded by the bytes of its keys and
//! starts over when full (docs/decisions.md, "The built-in authorizer's allows are
//! remembered").

use std::collections::HashSet;
use std::sync::Mutex;

use super::wit::authz_types::AuthzRequest;

/// What the remembered requests may hold, counted as their strings' bytes. A key is a few
/// hundred bytes for a token of a few workspaces, so this is thousands of hot keys.
pub(super) const MEMO_BYTES: usize = 4 << 20;

#[derive(Debug)]
pub(super) struct AllowMemo {
    inner: Mutex<Inner>,
    budget: usize,
}

#[derive(Debug, Default)]
struct Inner {
    allowed: HashSet<AuthzRequest>,
    bytes: usize,
}

impl AllowMemo {
    pub(super) fn new(budget: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            budget,
        }
    }

    /// Whether `request` was allowed before.
    pub(super) fn allows(&self, request: &AuthzRequest) -> bool {
        self.inner
            .lock()
            .map(|inner| inner.allowed.contains(request))
            .unwrap_or(false)
    }

    /// Remembers that `request` was allowed; when the budget would be passed, forgets
    /// everything first (no recency bookkeeping on the hot path: the hot keys return at once).
    pub(super) fn remember(&self, request: &AuthzRequest) {
        let size = weight(request);
        if size > self.budget {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if inner.allowed.contains(request) {
            return;
        }
        if inner.bytes + size > self.budget {
            inner.allowed.clear();
            inner.bytes = 0;
        }
        inner.allowed.insert(request.clone());
        inner.bytes += size;
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner.lock().map(|i| i.allowed.len()).unwrap_or(0)
    }
}

/// The bytes a request's strings hold, plus a fixed share for the containers.
fn weight(r: &AuthzRequest) -> usize {
    let p = &r.principal;
    let list = |l: &[String]| l.iter().map(|s| s.len() + 24).sum::<usize>();
    256 + p.id.len()
        + p.user_id.len()
        + p.organisation_id.len()
        + list(&p.workspace_ids)
        + list(&p.environment_ids)
        + list(&p.scopes)
        + r.operation.len()
        + r.method.len()
        + r.route.len()
        + r.workspace_id.as_ref().map_or(0, String::len)
        + r.resource_ids
            .iter()
            .map(|(k, v)| k.len() + v.len() + 48)
            .sum::<usize>()
}
