//! Decision slots, shared between organisations in turn. A plain semaphore serves waiters first
//! come, first served: with 4 slots, an organisation that keeps 16 requests in flight keeps 12
//! decisions queued ahead of anyone else's request, which waits out all of them or the queue
//! timeout. Here a freed slot goes to the waiting organisation that holds the fewest slots (on a
//! tie, the one served least recently; an organisation that holds and waits for nothing is
//! forgotten, so it counts as never served), so a newcomer waits for one decision to end, not
//! for a flood's backlog. No slot is held back: one organisation alone may take them all.
//! Within an organisation, first come, first served.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use uuid::Uuid;

/// The decision slots of one engine.
pub struct DecisionSlots {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    free: usize,
    /// Organisations that hold or wait for a slot; one that does neither is removed (a waiter
    /// that gives up or is cancelled removes itself), so the map is bounded by the slots and the
    /// live waiters.
    tenants: HashMap<Uuid, Tenant>,
    /// Numbers waiters (their order within an organisation) and grants (turns between them).
    clock: u64,
}

#[derive(Default)]
struct Tenant {
    held: usize,
    last_grant: u64,
    waiting: VecDeque<Waiter>,
}

struct Waiter {
    ticket: u64,
    grant: oneshot::Sender<Slot>,
}

/// A held slot; dropping it passes it on.
pub struct Slot {
    /// `None` once it was handed back without being used (its waiter was gone).
    shared: Option<Arc<Shared>>,
    tenant: Uuid,
}

/// No slot came free within the wait.
#[derive(Debug, PartialEq, Eq)]
pub struct NoSlot;

impl DecisionSlots {
    pub fn new(slots: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    free: slots,
                    ..State::default()
                }),
            }),
        }
    }

    /// Waits at most `wait` for a slot for `tenant` (an organisation).
    pub async fn acquire(&self, tenant: Uuid, wait: Duration) -> Result<Slot, NoSlot> {
        let (ticket, mut granted) = {
            let mut state = self.shared.lock();
            // Waiters exist only while no slot is free, so a free slot is never taken past one.
            if state.free > 0 {
                state.free -= 1;
                state.grant(tenant);
                return Ok(self.shared.slot(tenant));
            }
            state.clock += 1;
            let ticket = state.clock;
            let (grant, granted) = oneshot::channel();
            let t = state.tenants.entry(tenant).or_default();
            t.waiting.push_back(Waiter { ticket, grant });
            (ticket, granted)
        };
        // Declared after `granted`, so a cancelled acquire (its request dropped) leaves the queue
        // before a slot granted meanwhile is dropped with the receiver and passed on.
        let queued = Queued {
            shared: &self.shared,
            tenant,
            ticket,
        };
        let waited = tokio::time::timeout(wait, &mut granted).await;
        drop(queued);
        match waited {
            Ok(Ok(slot)) => Ok(slot),
            // The sender is dropped only with its slot handed on, never here; treat it as full.
            Ok(Err(_)) => Err(NoSlot),
            // Granted between the timeout and leaving the queue: keep it, the work can start.
            Err(_) => granted.try_recv().map_err(|_| NoSlot),
        }
    }

    /// Slots free now.
    #[cfg(test)]
    fn free(&self) -> usize {
        self.shared.lock().free
    }
}

/// A waiter's place in its organisation's queue, left when this is dropped.
struct Queued<'a> {
    shared: &'a Arc<Shared>,
    tenant: Uuid,
    ticket: u64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if let Some(t) = state.tenants.get_mut(&self.tenant) {
            t.waiting.retain(|w| w.ticket != self.ticket);
        }
        state.forget_if_idle(self.tenant);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is counts and queues changed in single steps; a panic elsewhere leaves it
        // whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn slot(self: &Arc<Self>, tenant: Uuid) -> Slot {
        Slot {
            shared: Some(self.clone()),
            tenant,
        }
    }

    /// Gives the slot `from` held to the next waiter in turn, or frees it.
    fn release(self: &Arc<Self>, from: Uuid) {
        let mut state = self.lock();
        if let Some(t) = state.tenants.get_mut(&from) {
            t.held -= 1;
        }
        state.forget_if_idle(from);
        // Sent under the lock. A waiter leaves its queue before its receiver is dropped, so a
        // send should not fail; if one does, the slot comes back unused and goes to the next.
        while let Some((to, waiter)) = state.next_waiter() {
            state.grant(to);
            match waiter.grant.send(self.slot(to)) {
                Ok(()) => return,
                Err(mut unused) => {
                    unused.shared = None;
                    if let Some(t) = state.tenants.get_mut(&to) {
                        t.held -= 1;
                    }
                    state.forget_if_idle(to);
                }
            }
        }
        state.free += 1;
    }
}

impl State {
    /// Counts a slot given to `tenant` now.
    fn grant(&mut self, tenant: Uuid) {
        self.clock += 1;
        let now = self.clock;
        let t = self.tenants.entry(tenant).or_default();
        t.held += 1;
        t.last_grant = now;
    }

    /// The head waiter of the organisation holding the fewest slots; on a tie, the one served
    /// least recently, then the one waiting longest (organisations never served tie at 0).
    fn next_waiter(&mut self) -> Option<(Uuid, Waiter)> {
        let to = self
            .tenants
            .iter()
            .filter_map(|(id, t)| Some((id, t.held, t.last_grant, t.waiting.front()?.ticket)))
            .min_by_key(|&(_, held, last_grant, ticket)| (held, last_grant, ticket))
            .map(|(id, ..)| *id)?;
        let waiter = self.tenants.get_mut(&to)?.waiting.pop_front()?;
        Some((to, waiter))
    }

    fn forget_if_idle(&mut self, tenant: Uuid) {
        if self
            .tenants
            .get(&tenant)
            .is_some_and(|t| t.held == 0 && t.waiting.is_empty())
        {
            self.tenants.remove(&tenant);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.release(self.tenant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(5);

    fn org() -> Uuid {
        Uuid::new_v4()
    }

    /// Queues a waiter for `tenant` and lets it register before the next step.
    async fn queue(
        slots: &Arc<DecisionSlots>,
        tenant: Uuid,
        wait: Duration,
    ) -> tokio::task::JoinHandle<Result<Slot, NoSlot>> {
        let slots = slots.clone();
        let waiter = tokio::spawn(async move { slots.acquire(tenant, wait).await });
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        waiter
    }

    #[tokio::test]
    async fn one_organisation_alone_may_take_every_slot() {
        let slots = DecisionSlots::new(3);
        let a = org();
        let mut held = vec![];
        for _ in 0..3 {
            held.push(slots.acquire(a, LONG).await.unwrap());
        }
        assert_eq!(slots.free(), 0);
        assert_eq!(
            slots.acquire(a, Duration::from_millis(20)).await.err(),
            Some(NoSlot)
        );
        drop(held);
        assert_eq!(slots.free(), 3);
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_organisation_behind_a_flood_not_the_flood() {
        let slots = Arc::new(DecisionSlots::new(1));
        let (flood, other) = (org(), org());
        let first = slots.acquire(flood, LONG).await.unwrap();
        let mut backlog = vec![];
        for _ in 0..5 {
            backlog.push(queue(&slots, flood, LONG).await);
        }
        let newcomer = queue(&slots, other, LONG).await;
        drop(first);
        let granted = newcomer.await.unwrap().unwrap();
        assert_eq!(granted.tenant, other);
        assert!(
            backlog.iter().all(|w| !w.is_finished()),
            "the flood's backlog waits"
        );
        drop(granted);
        for waiter in backlog {
            drop(waiter.await.unwrap().unwrap());
        }
        assert_eq!(slots.free(), 1);
    }

    #[tokio::test]
    async fn waiting_organisations_take_turns() {
        let slots = Arc::new(DecisionSlots::new(1));
        let (a, b) = (org(), org());
        let holder = slots.acquire(a, LONG).await.unwrap();
        let (granted, mut grants) = tokio::sync::mpsc::unbounded_channel();
        for (label, tenant) in [("a1", a), ("a2", a), ("b1", b), ("b2", b)] {
            let (slots, granted) = (slots.clone(), granted.clone());
            tokio::spawn(async move {
                let slot = slots.acquire(tenant, LONG).await.unwrap();
                granted.send((label, slot)).unwrap();
            });
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(holder);
        let mut order = vec![];
        for _ in 0..4 {
            let (label, slot) = grants.recv().await.unwrap();
            order.push(label);
            drop(slot);
        }
        // b was never served, so it goes first; then turns; within each, first come first.
        assert_eq!(order, ["b1", "a1", "b2", "a2"]);
        assert_eq!(slots.free(), 1);
    }

    #[tokio::test]
    async fn organisations_never_served_go_in_the_order_they_came() {
        let slots = Arc::new(DecisionSlots::new(1));
        let holder = slots.acquire(org(), LONG).await.unwrap();
        let tenants: Vec<Uuid> = (0..8).map(|_| org()).collect();
        let mut waiters = vec![];
        for &tenant in &tenants {
            waiters.push(queue(&slots, tenant, LONG).await);
        }
        drop(holder);
        for (waiter, tenant) in waiters.into_iter().zip(tenants) {
            let slot = waiter.await.unwrap().unwrap();
            assert_eq!(slot.tenant, tenant);
        }
    }

    #[tokio::test]
    async fn the_organisation_holding_fewer_slots_goes_first() {
        // b holds two, a one; b queued before a. Served least recently alone would pick b
        // (its grants are older); fewest held picks a.
        let slots = Arc::new(DecisionSlots::new(3));
        let (a, b) = (org(), org());
        let _b1 = slots.acquire(b, LONG).await.unwrap();
        let _b2 = slots.acquire(b, LONG).await.unwrap();
        let a1 = slots.acquire(a, LONG).await.unwrap();
        let b_waiter = queue(&slots, b, LONG).await;
        let a_waiter = queue(&slots, a, LONG).await;
        drop(a1);
        let granted = a_waiter.await.unwrap().unwrap();
        assert_eq!(granted.tenant, a);
        assert!(!b_waiter.is_finished());
        drop(granted);
        drop(b_waiter.await.unwrap().unwrap());
    }

    #[tokio::test]
    async fn a_cancelled_waiter_leaves_the_queue() {
        let slots = Arc::new(DecisionSlots::new(1));
        let (a, b) = (org(), org());
        let holder = slots.acquire(a, LONG).await.unwrap();
        let cancelled = queue(&slots, b, LONG).await;
        cancelled.abort();
        assert!(cancelled.await.err().is_some_and(|e| e.is_cancelled()));
        assert!(
            !slots.shared.lock().tenants.contains_key(&b),
            "the cancelled waiter's organisation is forgotten"
        );
        drop(holder);
        assert_eq!(slots.free(), 1);
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_takes_no_slot_with_it() {
        let slots = Arc::new(DecisionSlots::new(1));
        let (a, b) = (org(), org());
        let holder = slots.acquire(a, LONG).await.unwrap();
        let gone = queue(&slots, b, Duration::from_millis(10)).await;
        assert_eq!(gone.await.unwrap().err(), Some(NoSlot));
        drop(holder);
        assert_eq!(slots.free(), 1);
        assert!(
            slots.shared.lock().tenants.is_empty(),
            "no organisation is remembered"
        );
    }
}
