//! Warm instances of policies installed `per-organisation`. An instance serves the decisions of
//! one organisation and one policy version only: it is keyed by both, so no state a guest keeps
//! in its globals ever reaches another tenant. It goes back to the pool only after a decision
//! that returned, and is retired after `max_decisions` decisions or `max_age`, after a memory
//! growth past its first decision, or when its version is no longer in force; any trap,
//! deadline or other failure drops it where it fails (a trapped wasmtime store cannot be entered
//! again anyway). Instances are bounded per organisation and in all: past a bound, the least
//! recently used idle instance is evicted, and with none idle the decision runs in a one-off
//! instance, so the pool never waits and decision slots (`slots.rs`) stay the only queue.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use uuid::Uuid;
use wasmtime::Store;

use super::engine::{Bound, Sandbox};

/// The bounds of warm instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmSettings {
    /// Decisions an instance serves before it is replaced.
    pub max_decisions: u32,
    /// How long an instance serves before it is replaced, used or not.
    pub max_age: Duration,
    /// Instances of one organisation, idle or deciding.
    pub per_organisation: usize,
    /// Instances of all organisations together, idle or deciding; each holds a pool slot.
    pub total: usize,
}

impl WarmSettings {
    /// Bounds when none are configured: as many instances per organisation as decision slots
    /// (one organisation alone may fill every slot), four times that in all but at most 64
    /// (each holds a pool slot: 16 GiB of address space), never fewer than the slots.
    pub fn default_for(slots: usize) -> Self {
        let slots = slots.max(1);
        Self {
            max_decisions: 1_000,
            max_age: Duration::from_secs(60),
            per_organisation: slots,
            total: (slots * 4).min(64).max(slots),
        }
    }
}

/// A warm instance: its store, the exports bound in it, and what it has served.
pub(super) struct Warm {
    pub(super) store: Store<Sandbox>,
    pub(super) bound: Bound,
    decisions: u32,
    born: Instant,
    last_used: Instant,
    /// Its place in the bounds; `None` for a one-off instance past them.
    counted: Option<Counted>,
}

impl Warm {
    pub(super) fn new(store: Store<Sandbox>, bound: Bound, counted: Option<Counted>) -> Self {
        let now = Instant::now();
        Self {
            store,
            bound,
            decisions: 0,
            born: now,
            last_used: now,
            counted,
        }
    }

    pub(super) fn is_one_off(&self) -> bool {
        self.counted.is_none()
    }
}

/// One instance's place in the bounds, given up when the instance is dropped.
pub(super) struct Counted {
    shared: Weak<Shared>,
    organisation: Uuid,
}

impl Drop for Counted {
    fn drop(&mut self) {
        // Never dropped under the pool's lock: every removal drops outside it.
        if let Some(shared) = self.shared.upgrade() {
            shared.lock().release(self.organisation);
            shared.instances.dec();
        }
    }
}

/// The warm instances of one engine.
pub(super) struct WarmPool {
    shared: Arc<Shared>,
    settings: WarmSettings,
}

struct Shared {
    state: Mutex<State>,
    instances: prometheus::IntGauge,
    decisions: prometheus::IntCounterVec,
    retired: prometheus::IntCounterVec,
}

#[derive(Default)]
struct State {
    /// Idle instances by (policy version, organisation), the most recently used last.
    idle: HashMap<(u64, Uuid), Vec<Warm>>,
    /// Instances of each organisation, idle or deciding.
    per_organisation: HashMap<Uuid, usize>,
    total: usize,
    /// The policy versions in force; `None` until the runtime first says (engine tests).
    in_force: Option<HashSet<u64>>,
    last_sweep: Option<Instant>,
}

impl State {
    fn release(&mut self, organisation: Uuid) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per_organisation.get_mut(&organisation) {
            *n -= 1;
            if *n == 0 {
                self.per_organisation.remove(&organisation);
            }
        }
    }

    /// Takes the least recently used idle instance, of `organisation` only if given.
    fn evict(&mut self, organisation: Option<Uuid>) -> Option<Warm> {
        let key = self
            .idle
            .iter()
            .filter(|((_, org), _)| organisation.is_none_or(|o| o == *org))
            .filter_map(|(key, list)| list.first().map(|w| (*key, w.last_used)))
            .min_by_key(|(_, used)| *used)?
            .0;
        let list = self.idle.get_mut(&key)?;
        let warm = list.remove(0);
        if list.is_empty() {
            self.idle.remove(&key);
        }
        Some(warm)
    }

    /// Removes every idle instance `retire` names a reason for.
    fn drain(
        &mut self,
        mut retire: impl FnMut(u64, &Warm) -> Option<&'static str>,
    ) -> Vec<(&'static str, Warm)> {
        let mut gone = Vec::new();
        self.idle.retain(|(policy, _), list| {
            let mut kept = Vec::with_capacity(list.len());
            for warm in list.drain(..) {
                match retire(*policy, &warm) {
                    Some(reason) => gone.push((reason, warm)),
                    None => kept.push(warm),
                }
            }
            *list = kept;
            !list.is_empty()
        });
        gone
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// How often idle instances are looked over for age, at most.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

impl WarmPool {
    pub(super) fn new(settings: WarmSettings) -> Result<Self, prometheus::Error> {
        Ok(Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                instances: prometheus::IntGauge::new(
                    "policy_warm_instances",
                    "Warm policy instances alive (idle or deciding), of all organisations",
                )?,
                decisions: prometheus::IntCounterVec::new(
                    prometheus::Opts::new(
                        "policy_warm_decisions_total",
                        "Decisions of per-organisation policies, by the instance they ran in: \
                         reused, new, or one_off (past the bounds)",
                    ),
                    &["instance"],
                )?,
                retired: prometheus::IntCounterVec::new(
                    prometheus::Opts::new(
                        "policy_warm_retired_total",
                        "Warm policy instances retired, by reason",
                    ),
                    &["reason"],
                )?,
            }),
            settings,
        })
    }

    pub(super) fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.shared.instances.clone()),
            Box::new(self.shared.decisions.clone()),
            Box::new(self.shared.retired.clone()),
        ]
    }

    fn retire(&self, gone: Vec<(&'static str, Warm)>) {
        for (reason, warm) in gone {
            self.shared.retired.with_label_values(&[reason]).inc();
            // The store is dropped here, outside the lock: the pool resets its slot.
            drop(warm);
        }
    }

    /// The most recently used idle instance of `policy` for `organisation` that is still young
    /// enough, if any.
    pub(super) fn take(&self, policy: u64, organisation: Uuid) -> Option<Warm> {
        let max_age = self.settings.max_age;
        let (found, gone) = {
            let mut state = self.shared.lock();
            let mut gone = self.sweep(&mut state);
            let mut found = None;
            if let Some(list) = state.idle.get_mut(&(policy, organisation)) {
                while let Some(warm) = list.pop() {
                    if warm.born.elapsed() < max_age {
                        found = Some(warm);
                        break;
                    }
                    gone.push(("age", warm));
                }
                if list.is_empty() {
                    state.idle.remove(&(policy, organisation));
                }
            }
            (found, gone)
        };
        self.retire(gone);
        if found.is_some() {
            self.shared.decisions.with_label_values(&["reused"]).inc();
        }
        found
    }

    /// A place for one more instance of `organisation`, or `None` past the bounds with nothing
    /// idle to evict: the decision then runs in a one-off instance.
    pub(super) fn admit(&self, organisation: Uuid) -> Option<Counted> {
        let settings = self.settings;
        let (counted, gone) = {
            let mut state = self.shared.lock();
            let mut gone = Vec::new();
            let own = state
                .per_organisation
                .get(&organisation)
                .copied()
                .unwrap_or(0);
            // Past a bound, the least recently used idle instance makes room: the
            // organisation's own when it is at its bound, anyone's when all are.
            let room = if own >= settings.per_organisation {
                state.evict(Some(organisation))
            } else if state.total >= settings.total {
                state.evict(None)
            } else {
                None
            };
            if let Some(mut victim) = room {
                if let Some(mut place) = victim.counted.take() {
                    place.shared = Weak::new();
                    state.release(place.organisation);
                    self.shared.instances.dec();
                }
                gone.push(("evicted", victim));
            }
            let own = state
                .per_organisation
                .get(&organisation)
                .copied()
                .unwrap_or(0);
            let counted =
                (own < settings.per_organisation && state.total < settings.total).then(|| {
                    *state.per_organisation.entry(organisation).or_default() += 1;
                    state.total += 1;
                    self.shared.instances.inc();
                    Counted {
                        shared: Arc::downgrade(&self.shared),
                        organisation,
                    }
                });
            (counted, gone)
        };
        self.retire(gone);
        let instance = if counted.is_some() { "new" } else { "one_off" };
        self.shared.decisions.with_label_values(&[instance]).inc();
        counted
    }

    /// An instance whose decision returned: back to the pool, or retired if it has served its
    /// decisions or time, grew its memory after its first decision, or its version left force.
    pub(super) fn give_back(&self, policy: u64, organisation: Uuid, mut warm: Warm, grew: bool) {
        warm.decisions += 1;
        let now = Instant::now();
        let reason = if warm.is_one_off() {
            Some("one_off")
        } else if grew && warm.decisions > 1 {
            // A guest's allocator takes its heap in the first decision; growing after that is
            // state that outlives a decision.
            Some("growth")
        } else if warm.decisions >= self.settings.max_decisions {
            Some("decisions")
        } else if now.duration_since(warm.born) >= self.settings.max_age {
            Some("age")
        } else {
            None
        };
        let gone = match reason {
            Some(reason) => vec![(reason, warm)],
            None => {
                let mut state = self.shared.lock();
                if state
                    .in_force
                    .as_ref()
                    .is_some_and(|live| !live.contains(&policy))
                {
                    vec![("replaced", warm)]
                } else {
                    warm.last_used = now;
                    state
                        .idle
                        .entry((policy, organisation))
                        .or_default()
                        .push(warm);
                    self.sweep(&mut state)
                }
            }
        };
        self.retire(gone);
    }

    /// Counts an instance dropped where its decision failed.
    pub(super) fn note_failure(&self) {
        self.shared.retired.with_label_values(&["failure"]).inc();
    }

    /// The policy versions now in force: idle instances of any other are retired, and
    /// instances deciding for one are retired when they come back.
    pub(super) fn keep_only(&self, in_force: &[u64]) {
        let gone = {
            let mut state = self.shared.lock();
            let live: HashSet<u64> = in_force.iter().copied().collect();
            let gone = state.drain(|policy, _| (!live.contains(&policy)).then_some("replaced"));
            state.in_force = Some(live);
            gone
        };
        self.retire(gone);
    }

    /// Idle instances past their age, once a [`SWEEP_EVERY`] at most: an organisation that
    /// stops sending requests does not keep its instances for longer than that.
    fn sweep(&self, state: &mut State) -> Vec<(&'static str, Warm)> {
        let now = Instant::now();
        if state
            .last_sweep
            .is_some_and(|at| now.duration_since(at) < SWEEP_EVERY)
        {
            return Vec::new();
        }
        state.last_sweep = Some(now);
        let max_age = self.settings.max_age;
        state.drain(|_, warm| (now.duration_since(warm.born) >= max_age).then_some("age"))
    }

    /// Instances alive (idle or deciding), in all and of `organisation`.
    #[cfg(test)]
    pub(super) fn counts(&self, organisation: Uuid) -> (usize, usize) {
        let state = self.shared.lock();
        (
            state.total,
            state
                .per_organisation
                .get(&organisation)
                .copied()
                .unwrap_or(0),
        )
    }

    /// Decisions counted under `instance` (reused, new, one_off) so far.
    #[cfg(test)]
    pub(super) fn decided(&self, instance: &str) -> u64 {
        self.shared.decisions.with_label_values(&[instance]).get()
    }

    /// Instances retired for `reason` so far.
    #[cfg(test)]
    pub(super) fn retired(&self, reason: &str) -> u64 {
        self.shared.retired.with_label_values(&[reason]).get()
    }
}
