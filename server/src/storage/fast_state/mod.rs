//! Fast state: idempotency records and rate limits. Redis when several replicas share it, an
//! in-process adapter when one process runs alone; both keep the same promises.

pub mod keys;
mod memory;
mod redis;
mod redis_connection;
mod redis_location;
mod sqlite;

pub use memory::MemoryFastState;
pub use redis::RedisFastState;
pub use redis_connection::RedisConnection;
pub use redis_location::{RedisLocation, RedisLocationError};
pub use sqlite::SqliteFastState;

use std::time::Duration;

use async_trait::async_trait;

#[derive(Debug, Clone, thiserror::Error)]
pub enum FastStateError {
    /// The store cannot be reached or did not answer in time.
    #[error("fast state unavailable: {0}")]
    Unavailable(String),
}

pub type FastResult<T> = Result<T, FastStateError>;

/// A claim a request holds on an idempotency key: the key, the claim's owner, and the
/// fingerprint of the request that claimed it.
#[derive(Debug, Clone, Copy)]
pub struct HeldKey<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub fingerprint: &'a str,
}

/// What a claim on an idempotency key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key was free and is now held by `owner` for the lease.
    Acquired { owner: String },
    /// Another request holds the key and is still running.
    InFlight { fingerprint: String },
    /// A finished request stored its response under the key.
    Done {
        fingerprint: String,
        record: Vec<u8>,
    },
}

#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Atomically reads the key, or claims it for `lease` when it is free.
    async fn claim(&self, key: &str, fingerprint: &str, lease: Duration) -> FastResult<Claim>;
    /// Replaces `owner`'s claim with the finished record, kept for `ttl`. A claim whose lease
    /// ran out (and was perhaps taken by another request) is left alone.
    async fn complete(&self, held: HeldKey<'_>, record: &[u8], ttl: Duration) -> FastResult<()>;
    /// Frees `owner`'s claim without a record: the request may be retried with the same key.
    async fn release(&self, held: HeldKey<'_>) -> FastResult<()>;
    /// Removes whatever is stored under the key (a record that cannot be decrypted).
    async fn discard(&self, key: &str) -> FastResult<()>;
    /// The bytes counted under a quota key in its current window (0 when none is open), and
    /// how long that window has left.
    async fn stored_bytes(&self, key: &str) -> FastResult<(u64, Duration)>;
    /// Adds `bytes` to a quota key; the first bytes open a window of `window`, at whose end the
    /// count starts again from 0.
    async fn count_stored(&self, key: &str, bytes: u64, window: Duration) -> FastResult<()>;
}

/// A rate: `burst` requests per `period`, refilled evenly (GCRA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub burst: u32,
    pub period: Duration,
}

impl Rate {
    /// Parses `N/period` with a period of `s`, `m`, `h` or a number of seconds, e.g. `600/m`,
    /// `10/s`, `100/30s`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let invalid =
            || format!("invalid rate {raw:?}: expected N/period such as 600/m, 10/s or 100/30s");
        let (count, period) = raw.split_once('/').ok_or_else(invalid)?;
        let burst: u32 = count
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(invalid)?;
        let period = period.trim();
        let (number, unit) = match period.find(|c: char| !c.is_ascii_digit()) {
            Some(0) => ("1", period),
            Some(i) => period.split_at(i),
            None => (period, "s"),
        };
        let number: u64 = number.parse().ok().filter(|n| *n > 0).ok_or_else(invalid)?;
        let seconds = match unit {
            "s" => number,
            "m" => number * 60,
            "h" => number * 3600,
            _ => return Err(invalid()),
        };
        Ok(Self {
            burst,
            period: Duration::from_secs(seconds),
        })
    }

    /// Time between two requests at the sustained rate, in milliseconds (at least 1).
    pub fn interval_ms(&self) -> u64 {
        (self.period.as_millis() as u64 / u64::from(self.burst)).max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// When denied: how long until one request is allowed.
    pub retry_after: Duration,
}

/// One budget a request spends: where its state lives, and its rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub key: String,
    pub rate: Rate,
}

/// The decision on a request that spends several buckets, and the bucket it reports (an index
/// into them): when refused, the refusing bucket with the longest wait; when allowed, the
/// tightest one (fewest requests left; the first of equals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub decision: RateDecision,
    pub bucket: usize,
}

#[async_trait]
pub trait RateLimiter: Send + Sync {
    /// Counts one request against every bucket (at least one), atomically: it is allowed only
    /// when every bucket allows it, and only then charged, to every bucket. A refusal charges
    /// none, so a request refused by one budget does not spend the others.
    async fn check(&self, buckets: &[Bucket]) -> Result<Verdict, FastStateError>;
}

/// Single-use values (runner signature nonces), remembered for a while.
#[async_trait]
pub trait NonceStore: Send + Sync {
    /// Remembers `key` for `ttl`; false when it was already remembered (a replay). Atomic
    /// across every process sharing the store.
    async fn remember(&self, key: &str, ttl: Duration) -> Result<bool, FastStateError>;
}

/// Console sessions that were signed out before they expired, remembered until they would
/// have: a session lives in its sealed cookie, so ending one early means remembering its id.
#[async_trait]
pub trait SignOuts: Send + Sync {
    /// Remembers `key` as ended for `ttl`.
    async fn end(&self, key: &str, ttl: Duration) -> Result<(), FastStateError>;
    /// Whether `key` was ended and is still remembered. Seen by every process sharing the store.
    async fn has_ended(&self, key: &str) -> Result<bool, FastStateError>;
}

/// Claims that coalesce many callers into one per window: the last-use record of a token is
/// written by whoever wins its claim, at most once a window across every process sharing the
/// store. The same atomic "set if absent, with a TTL" as a nonce, under a port of its own so
/// that a change to one cannot break the other's promise.
#[async_trait]
pub trait UseClaims: Send + Sync {
    /// True for the one caller that finds `key` free, which then holds it for `ttl`; false for
    /// every other caller until then. Atomic across every process sharing the store.
    async fn claim_window(&self, key: &str, ttl: Duration) -> Result<bool, FastStateError>;
}

/// GCRA on a theoretical arrival time `tat` (ms): shared by the in-process adapter and, in Lua,
/// by the Redis one. Returns the decision and the new `tat` to store when allowed.
pub fn gcra(now_ms: u64, tat_ms: Option<u64>, rate: Rate) -> (RateDecision, Option<u64>) {
    // Signed: with a clock that starts near zero, `allow_at` is legitimately negative.
    let now = now_ms as i128;
    let interval = i128::from(rate.interval_ms());
    let burst = i128::from(rate.burst);
    let tat = tat_ms.map_or(now, i128::from).max(now);
    let new_tat = tat + interval;
    let allow_at = new_tat - burst * interval;
    if allow_at > now {
        let decision = RateDecision {
            allowed: false,
            limit: rate.burst,
            remaining: 0,
            retry_after: Duration::from_millis((allow_at - now) as u64),
        };
        return (decision, None);
    }
    let remaining = ((now - allow_at) / interval).min(burst - 1) as u32;
    let new_tat = new_tat as u64;
    let decision = RateDecision {
        allowed: true,
        limit: rate.burst,
        remaining,
        retry_after: Duration::ZERO,
    };
    (decision, Some(new_tat))
}

/// [`gcra`] over several buckets at once, with the rules of [`RateLimiter::check`]: the verdict
/// and, when allowed, every bucket's new `tat`. The Redis adapter's script follows the same
/// steps.
pub fn gcra_all(now_ms: u64, tats: &[Option<u64>], rates: &[Rate]) -> (Verdict, Option<Vec<u64>>) {
    let mut new_tats = Vec::with_capacity(rates.len());
    let mut picked: Option<(usize, RateDecision)> = None;
    for (i, (tat, rate)) in tats.iter().zip(rates).enumerate() {
        let (decision, new_tat) = gcra(now_ms, *tat, *rate);
        new_tats.extend(new_tat);
        let better = match picked {
            None => true,
            Some((_, p)) if p.allowed => !decision.allowed || decision.remaining < p.remaining,
            Some((_, p)) => !decision.allowed && decision.retry_after > p.retry_after,
        };
        if better {
            picked = Some((i, decision));
        }
    }
    let (bucket, decision) = picked.expect("at least one bucket");
    let verdict = Verdict { decision, bucket };
    (verdict, decision.allowed.then_some(new_tats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(
            Rate::parse("600/m"),
            Ok(Rate {
                burst: 600,
                period: Duration::from_secs(60)
            })
        );
        assert_eq!(
            Rate::parse("10/s").map(|r| r.period),
            Ok(Duration::from_secs(1))
        );
        assert_eq!(
            Rate::parse("100/30s").map(|r| r.period),
            Ok(Duration::from_secs(30))
        );
        assert_eq!(
            Rate::parse("5/2h").map(|r| r.period),
            Ok(Duration::from_secs(7200))
        );
        for bad in ["", "0/m", "10", "10/x", "-1/m", "10/0s"] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn gcra_works_with_a_clock_near_zero() {
        let rate = Rate {
            burst: 3,
            period: Duration::from_secs(60),
        };
        let (first, _) = gcra(5, None, rate);
        assert_eq!(first.remaining, 2);
    }

    #[test]
    fn gcra_allows_a_burst_then_spaces_requests() {
        let rate = Rate {
            burst: 3,
            period: Duration::from_secs(3),
        };
        let mut tat = None;
        let mut remaining = vec![];
        for _ in 0..3 {
            let (d, new) = gcra(10_000, tat, rate);
            assert!(d.allowed);
            remaining.push(d.remaining);
            tat = new;
        }
        assert_eq!(remaining, [2, 1, 0]);
        let (denied, none) = gcra(10_000, tat, rate);
        assert!(!denied.allowed && none.is_none());
        assert_eq!(denied.retry_after, Duration::from_secs(1));
        let (later, _) = gcra(11_000, tat, rate);
        assert!(later.allowed);
    }

    #[test]
    fn several_buckets_report_the_tightest_and_a_refusal_charges_none() {
        let wide = Rate::parse("10/s").unwrap();
        let narrow = Rate::parse("2/s").unwrap();
        let rates = [wide, narrow, wide];
        let (first, tats) = gcra_all(10_000, &[None, None, None], &rates);
        assert!(first.decision.allowed);
        assert_eq!((first.bucket, first.decision.limit), (1, 2));
        assert_eq!(first.decision.remaining, 1);
        let tats: Vec<_> = tats.unwrap().into_iter().map(Some).collect();
        let (second, tats2) = gcra_all(10_000, &tats, &rates);
        assert_eq!((second.bucket, second.decision.remaining), (1, 0));
        let tats2: Vec<_> = tats2.unwrap().into_iter().map(Some).collect();
        let (refused, none) = gcra_all(10_000, &tats2, &rates);
        assert!(!refused.decision.allowed && none.is_none());
        assert_eq!((refused.bucket, refused.decision.limit), (1, 2));
        // Of two refusing buckets, the longer wait is reported.
        let slow = Rate::parse("1/10s").unwrap();
        let (both, _) = gcra_all(10_000, &[Some(11_000), Some(20_000)], &[narrow, slow]);
        assert!(!both.decision.allowed);
        assert_eq!(both.bucket, 1);
    }
}

/// What every adapter of [`IdempotencyStore`] and [`NonceStore`] promises, run by each
/// adapter's tests against its own store through [`contract_tests!`]. Each promise takes a key
/// namespace, so adapters whose store outlives the test (Redis) keep runs apart.
#[cfg(test)]
pub mod contract {
    use super::*;

    /// The claim `owner` holds on `key`, for a request fingerprinted `fp`.
    fn held<'a>(key: &'a str, owner: &'a str) -> HeldKey<'a> {
        HeldKey {
            key,
            owner,
            fingerprint: "fp",
        }
    }

    /// One `#[tokio::test]` per promise for an adapter. `$open` is an async expression giving
    /// `Some((guard, namespace, store))`, or `None` when the store is not there (a skip; the
    /// opener decides whether that fails the run). The guard lives until the test ends.
    macro_rules! contract_tests {
        ($open:expr) => {
            $crate::storage::fast_state::contract::contract_tests!(
                $open;
                claims_are_exclusive_and_records_replace_them,
                a_lapsed_lease_is_free_and_its_owner_can_no_longer_complete_or_release,
                quota_counts_add_up_within_their_window_and_start_again_after_it,
                a_nonce_is_spent_once_until_it_expires,
                a_use_claim_is_won_once_per_window,
                a_sign_out_is_seen_until_it_expires,
            );
        };
        ($open:expr; $($promise:ident),+ $(,)?) => {
            $(
                #[tokio::test]
                async fn $promise() {
                    if let Some((_guard, ns, state)) = $open.await {
                        $crate::storage::fast_state::contract::$promise(&state, &ns).await;
                    }
                }
            )+
        };
    }
    pub(crate) use contract_tests;

    /// `stranger`, who does not hold the claim on `key` (fingerprint `fp`), can neither
    /// complete it (with `record`) nor release it: the claim is still in flight.
    async fn a_stranger_changes_nothing(
        state: &impl IdempotencyStore,
        key: &str,
        stranger: &str,
        record: &[u8],
    ) {
        let lease = Duration::from_secs(5);
        state
            .complete(held(key, stranger), record, lease)
            .await
            .unwrap();
        state.release(held(key, stranger)).await.unwrap();
        assert!(matches!(
            state.claim(key, "fp", lease).await.unwrap(),
            Claim::InFlight { .. }
        ));
    }

    /// `owner` completes its claim on `key` (fingerprint `fp`); a claim with `fingerprint` then
    /// finds the record.
    async fn the_holder_completes(
        state: &impl IdempotencyStore,
        key: &str,
        owner: &str,
        fingerprint: &str,
    ) {
        let lease = Duration::from_secs(5);
        state
            .complete(held(key, owner), b"record", lease)
            .await
            .unwrap();
        assert_eq!(
            state.claim(key, fingerprint, lease).await.unwrap(),
            Claim::Done {
                fingerprint: "fp".into(),
                record: b"record".to_vec()
            }
        );
    }

    pub async fn claims_are_exclusive_and_records_replace_them(
        state: &impl IdempotencyStore,
        ns: &str,
    ) {
        let key = |name: &str| format!("{ns}{name}");
        let lease = Duration::from_secs(5);
        let Claim::Acquired { owner } = state.claim(&key("k"), "fp", lease).await.unwrap() else {
            panic!("free key")
        };
        assert_eq!(
            state.claim(&key("k"), "fp", lease).await.unwrap(),
            Claim::InFlight {
                fingerprint: "fp".into()
            }
        );
        a_stranger_changes_nothing(state, &key("k"), "someone-else", b"x").await;
        the_holder_completes(state, &key("k"), &owner, "other").await;
        // A record is not a claim: its owner's release leaves it; a discard removes it.
        state.release(held(&key("k"), &owner)).await.unwrap();
        assert!(matches!(
            state.claim(&key("k"), "fp", lease).await.unwrap(),
            Claim::Done { .. }
        ));
        state.discard(&key("k")).await.unwrap();
        assert!(matches!(
            state.claim(&key("k"), "fp", lease).await.unwrap(),
            Claim::Acquired { .. }
        ));
        // A released claim frees the key for a retry.
        let Claim::Acquired { owner } = state.claim(&key("r"), "fp", lease).await.unwrap() else {
            panic!("free key")
        };
        state.release(held(&key("r"), &owner)).await.unwrap();
        assert!(matches!(
            state.claim(&key("r"), "fp", lease).await.unwrap(),
            Claim::Acquired { .. }
        ));
    }

    pub async fn a_lapsed_lease_is_free_and_its_owner_can_no_longer_complete_or_release(
        state: &impl IdempotencyStore,
        ns: &str,
    ) {
        let key = |name: &str| format!("{ns}{name}");
        let Claim::Acquired { owner: first } = state
            .claim(&key("k"), "fp", Duration::from_millis(1))
            .await
            .unwrap()
        else {
            panic!("free key")
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        let lease = Duration::from_secs(5);
        let Claim::Acquired { owner: second } = state.claim(&key("k"), "fp", lease).await.unwrap()
        else {
            panic!("a lapsed lease frees the key")
        };
        assert_ne!(first, second);
        a_stranger_changes_nothing(state, &key("k"), &first, b"late").await;
        the_holder_completes(state, &key("k"), &second, "fp").await;
    }

    pub async fn quota_counts_add_up_within_their_window_and_start_again_after_it(
        state: &impl IdempotencyStore,
        ns: &str,
    ) {
        let key = |name: &str| format!("{ns}{name}");
        // Wide enough that a slow store counts twice within it.
        let window = Duration::from_millis(500);
        assert_eq!(
            state.stored_bytes(&key("q")).await.unwrap(),
            (0, Duration::ZERO)
        );
        state.count_stored(&key("q"), 100, window).await.unwrap();
        state.count_stored(&key("q"), 50, window).await.unwrap();
        let (bytes, left) = state.stored_bytes(&key("q")).await.unwrap();
        assert_eq!(bytes, 150);
        assert!(left > Duration::ZERO && left <= window);
        tokio::time::sleep(window + Duration::from_millis(50)).await;
        assert_eq!(state.stored_bytes(&key("q")).await.unwrap().0, 0);
        state.count_stored(&key("q"), 7, window).await.unwrap();
        assert_eq!(
            state.stored_bytes(&key("q")).await.unwrap().0,
            7,
            "a new window"
        );
    }

    pub async fn a_use_claim_is_won_once_per_window(state: &impl UseClaims, ns: &str) {
        let key = |name: &str| format!("{ns}{name}");
        let ttl = Duration::from_millis(500);
        assert!(state.claim_window(&key("t"), ttl).await.unwrap());
        assert!(
            !state.claim_window(&key("t"), ttl).await.unwrap(),
            "a second caller within the window loses"
        );
        assert!(
            state.claim_window(&key("other"), ttl).await.unwrap(),
            "keys are independent"
        );
        // Concurrent callers: exactly one wins.
        let key_c = key("c");
        let claims = (0..8).map(|_| state.claim_window(&key_c, ttl));
        let won = futures_util::future::join_all(claims)
            .await
            .into_iter()
            .filter(|r| *r.as_ref().unwrap())
            .count();
        assert_eq!(won, 1, "one winner among concurrent callers");
        tokio::time::sleep(ttl + Duration::from_millis(50)).await;
        assert!(
            state.claim_window(&key("t"), ttl).await.unwrap(),
            "free again after the window"
        );
    }

    pub async fn a_nonce_is_spent_once_until_it_expires(state: &impl NonceStore, ns: &str) {
        let key = |name: &str| format!("{ns}{name}");
        let ttl = Duration::from_millis(500);
        assert!(state.remember(&key("n"), ttl).await.unwrap());
        assert!(!state.remember(&key("n"), ttl).await.unwrap(), "a replay");
        assert!(state.remember(&key("other"), ttl).await.unwrap());
        tokio::time::sleep(ttl + Duration::from_millis(50)).await;
        assert!(
            state.remember(&key("n"), ttl).await.unwrap(),
            "forgotten after its TTL"
        );
    }

    pub async fn a_sign_out_is_seen_until_it_expires(state: &impl SignOuts, ns: &str) {
        let key = |name: &str| format!("{ns}{name}");
        let ttl = Duration::from_millis(500);
        assert!(!state.has_ended(&key("s")).await.unwrap(), "not yet ended");
        state.end(&key("s"), ttl).await.unwrap();
        assert!(state.has_ended(&key("s")).await.unwrap());
        assert!(!state.has_ended(&key("other")).await.unwrap());
        // Ending it again is no error (a sign-out sent twice).
        state.end(&key("s"), ttl).await.unwrap();
        // Forgotten after its TTL: polled, with a deadline well past it.
        let started = std::time::Instant::now();
        while state.has_ended(&key("s")).await.unwrap() {
            assert!(
                started.elapsed() < ttl * 10,
                "still ended {:?} after its TTL",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
