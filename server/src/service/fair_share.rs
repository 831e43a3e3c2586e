//! Fair delivery (issue #26): how many attempts one pool and one organisation may have in
//! flight in this process, which due deliveries to lease next, and what an attempt's end does
//! to its runner's breaker. The rules are here; the records store only selects (see
//! `storage/records/ports/deliveries.rs`).
//!
//! - **Caps**: at most `per_pool` attempts to one pool and `per_organisation` to one
//!   organisation's pools are in flight at once in this process, so a runner that holds every
//!   request open cannot take every slot: the rest stay free for other tenants. The caps are per
//!   process (each replica counts its own attempts), so with N replicas an organisation holds at
//!   most N times its cap in all, and each replica keeps the same room for the others.
//! - **Turns**: due deliveries are read organisation by organisation (every organisation's
//!   earliest, then every one's second…, and within one its pools in turn), without the pools
//!   and organisations at their cap, so a flood's queue is never ahead of another tenant's
//!   first delivery. Leasing takes from that list only what the caps leave room for.
//! - **Breaker**: an attempt that times out or takes at least `slow` is slow; `after` slow
//!   attempts in a row hold the runner for `cool_down` (nothing is leased to it, so its
//!   deliveries take no slot), then one attempt at a time goes to it until one is not slow. It
//!   trips for a pool's only runner too: that pool's deliveries wait, due, meanwhile.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::deliveries::{AttemptAnswer, FailureCategory};
use crate::storage::{BreakerStep, DueDelivery};

/// The breaker for slow runners (`--delivery-breaker-after`, `--delivery-breaker-cooldown-ms`,
/// `--delivery-slow-ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Slow attempts in a row that hold a runner; 0: never.
    pub after: u32,
    /// How long a tripped breaker holds its runner.
    pub cool_down: Duration,
    /// An attempt that took at least this long is slow (one that timed out always is).
    pub slow: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            after: 3,
            cool_down: Duration::from_secs(30),
            slow: Duration::from_secs(5),
        }
    }
}

impl BreakerSettings {
    /// What an attempt that ended at `now` with `answer` does to its runner's breaker.
    pub(super) fn step(&self, answer: &AttemptAnswer, now: DateTime<Utc>) -> BreakerStep {
        let timed_out = answer
            .failure
            .as_ref()
            .is_some_and(|f| f.category == FailureCategory::Timeout);
        BreakerStep {
            slow: self.after > 0 && (timed_out || answer.latency >= self.slow),
            trip_after: i32::try_from(self.after).unwrap_or(i32::MAX),
            hold_until: now + chrono::Duration::from_std(self.cool_down).unwrap_or_default(),
        }
    }
}

/// Attempts in flight in this process, by pool and by organisation, against their caps.
#[derive(Debug)]
pub(super) struct InFlight {
    per_pool: usize,
    per_organisation: usize,
    pools: HashMap<Uuid, usize>,
    organisations: HashMap<Uuid, usize>,
}

impl InFlight {
    pub(super) fn new(per_pool: usize, per_organisation: usize) -> Self {
        Self {
            per_pool: per_pool.max(1),
            per_organisation: per_organisation.max(1),
            pools: HashMap::new(),
            organisations: HashMap::new(),
        }
    }

    /// The pools and the organisations at their cap: none of their deliveries is read.
    pub(super) fn full(&self) -> (Vec<Uuid>, Vec<Uuid>) {
        let at_cap = |counts: &HashMap<Uuid, usize>, cap: usize| {
            counts
                .iter()
                .filter(|(_, n)| **n >= cap)
                .map(|(id, _)| *id)
                .collect::<Vec<_>>()
        };
        (
            at_cap(&self.pools, self.per_pool),
            at_cap(&self.organisations, self.per_organisation),
        )
    }

    /// Of `due`, in its order, the deliveries the caps leave room for, at most `free`.
    pub(super) fn pick(&self, due: &[DueDelivery], free: usize) -> Vec<Uuid> {
        let mut pools: HashMap<Uuid, usize> = HashMap::new();
        let mut organisations: HashMap<Uuid, usize> = HashMap::new();
        let mut picked = Vec::new();
        for d in due {
            if picked.len() >= free {
                break;
            }
            let pool = pools
                .entry(d.pool_id)
                .or_insert_with(|| self.pools.get(&d.pool_id).copied().unwrap_or(0));
            let organisation = organisations.entry(d.organisation_id).or_insert_with(|| {
                self.organisations
                    .get(&d.organisation_id)
                    .copied()
                    .unwrap_or(0)
            });
            if *pool < self.per_pool && *organisation < self.per_organisation {
                *pool += 1;
                *organisation += 1;
                picked.push(d.delivery_id);
            }
        }
        picked
    }

    /// An attempt of `organisation`'s `pool` started.
    pub(super) fn start(&mut self, organisation: Uuid, pool: Uuid) {
        *self.pools.entry(pool).or_default() += 1;
        *self.organisations.entry(organisation).or_default() += 1;
    }

    /// An attempt of `organisation`'s `pool` ended.
    pub(super) fn end(&mut self, organisation: Uuid, pool: Uuid) {
        fn less(counts: &mut HashMap<Uuid, usize>, id: Uuid) {
            if let Some(n) = counts.get_mut(&id) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    counts.remove(&id);
                }
            }
        }
        less(&mut self.pools, pool);
        less(&mut self.organisations, organisation);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(organisation: Uuid, pool: Uuid) -> DueDelivery {
        DueDelivery {
            delivery_id: Uuid::new_v4(),
            organisation_id: organisation,
            pool_id: pool,
        }
    }

    #[test]
    fn picks_stop_at_each_cap_and_count_what_is_in_flight() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let (a1, a2, b1) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let mut in_flight = InFlight::new(2, 3);
        in_flight.start(a, a1);
        let list = [
            due(a, a1),
            due(b, b1),
            due(a, a2),
            due(a, a1), // a1 would hold 3: over its pool's cap
            due(a, a2), // a would hold 4: over its organisation's cap
            due(b, b1),
            due(b, b1), // b1 would hold 3
        ];
        let picked = in_flight.pick(&list, 10);
        let expected: Vec<Uuid> = [0, 1, 2, 5].iter().map(|i| list[*i].delivery_id).collect();
        assert_eq!(picked, expected);
        assert_eq!(in_flight.pick(&list, 2), expected[..2]);
        assert_eq!(in_flight.full(), (vec![], vec![]));
        in_flight.start(a, a1);
        in_flight.start(a, a2);
        assert_eq!(in_flight.full(), (vec![a1], vec![a]));
        in_flight.end(a, a1);
        in_flight.end(a, a1);
        in_flight.end(a, a1); // one too many is harmless
        assert_eq!(in_flight.full(), (vec![], vec![]));
        assert_eq!(in_flight.pools.len(), 1, "an idle pool is forgotten");
    }

    #[test]
    fn timeouts_and_long_attempts_are_slow_and_a_breaker_set_to_zero_never_trips() {
        let settings = BreakerSettings {
            after: 2,
            cool_down: Duration::from_secs(30),
            slow: Duration::from_millis(500),
        };
        let now = Utc::now();
        let fast = AttemptAnswer::from_status(204, Duration::from_millis(20));
        let long = AttemptAnswer::from_status(204, Duration::from_millis(600));
        let timed_out = AttemptAnswer::failed(
            FailureCategory::Timeout,
            "timed out".into(),
            Duration::from_millis(100),
        );
        let refused = AttemptAnswer::failed(FailureCategory::Connect, "no".into(), Duration::ZERO);
        assert!(!settings.step(&fast, now).slow);
        assert!(!settings.step(&refused, now).slow);
        assert!(settings.step(&long, now).slow);
        let step = settings.step(&timed_out, now);
        assert!(step.slow);
        assert_eq!(step.trip_after, 2);
        assert_eq!(step.hold_until, now + chrono::Duration::seconds(30));
        let off = BreakerSettings {
            after: 0,
            ..settings
        };
        assert!(!off.step(&timed_out, now).slow);
    }
}
