//! The Redis adapter of the fast-state ports, on a single Redis or a Redis Cluster alike. Every
//! operation is one Lua script: one round trip, atomic, and on Redis's own clock. Each script
//! touches one key, or (the rate limit) keys of one hash tag, so each runs within one cluster
//! slot (`keys.rs` pins it). Only the connection differs (`redis_connection.rs`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{OnceCell, Semaphore};

use super::redis_connection::{RedisConnection, RedisDialler};
use super::redis_location::RedisLocation;
use super::{
    Bucket, Claim, FastResult, FastStateError, HeldKey, IdempotencyStore, RateDecision,
    RateLimiter, Verdict,
};

/// A claim finding its own value is the same call run again: the cluster client retries a
/// script whose answer a failover lost, and that retry must acquire, not report the key in
/// flight (its caller would then wait out the lease on a claim no one runs). The owner in the
/// value is new per call, so no other request can match it.
const CLAIM: &str = r"
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
";

const COMPLETE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";

const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

/// GCRA over every key, with the rules of `fast::gcra_all`: ARGV holds each key's interval and
/// burst in turn. Nothing is written unless every key allows the request. Returns {allowed,
/// index of the reported key (from 0), remaining, retry ms}.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tats = {}
local pick, remaining, retry, denied = 0, 0, 0, false
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or now)
  if tat < now then tat = now end
  local new_tat = tat + interval
  local allow_at = new_tat - burst * interval
  if allow_at > now then
    if not denied or allow_at - now > retry then
      pick, retry = i, allow_at - now
    end
    denied = true
  elseif not denied then
    local left = math.floor((now - allow_at) / interval)
    if left > burst - 1 then left = burst - 1 end
    if pick == 0 or left < remaining then pick, remaining = i, left end
  end
  tats[i] = new_tat
end
if denied then return {0, pick - 1, 0, retry} end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], tats[i], 'PX', tats[i] - now)
end
return {1, pick - 1, remaining, 0}
";

/// The bytes counted under a quota key and the milliseconds left in its window.
const QUOTA_READ: &str = r"
local bytes = tonumber(redis.call('GET', KEYS[1]) or 0)
local left = redis.call('PTTL', KEYS[1])
if left < 0 then return {0, 0} end
return {bytes, left}
";

/// Adds to a quota key; the first addition opens its window.
const QUOTA_COUNT: &str = r"
redis.call('INCRBY', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
";

/// Claims released in the background at once, at most: past that, a claim whose release
/// failed is left to its lease. Each tries `RELEASE_TRIES` times, waiting 0.25 s doubling to
/// 16 s (32 s in all, about a lease), so a long outage costs Redis at most this many calls
/// every few seconds.
const RELEASES_LATER: usize = 64;
const RELEASE_TRIES: u32 = 7;
const RELEASE_FIRST_WAIT: Duration = Duration::from_millis(250);

pub struct RedisFastState {
    dialler: RedisDialler,
    connection: OnceCell<RedisConnection>,
    timeout: Duration,
    releases_later: Arc<Semaphore>,
    claim: redis::Script,
    complete: redis::Script,
    release: redis::Script,
    gcra: redis::Script,
    quota_read: redis::Script,
    quota_count: redis::Script,
}

impl RedisFastState {
    /// Nothing is dialled until first use, so the server starts (and recovers) while Redis is down.
    pub fn new(location: &RedisLocation, timeout: Duration) -> Result<Self, FastStateError> {
        let dialler = RedisDialler::new(location, timeout)
            .map_err(|e| FastStateError::Unavailable(format!("invalid REDIS_URL: {e}")))?;
        Ok(Self {
            dialler,
            connection: OnceCell::new(),
            timeout,
            releases_later: Arc::new(Semaphore::new(RELEASES_LATER)),
            claim: redis::Script::new(CLAIM),
            complete: redis::Script::new(COMPLETE),
            release: redis::Script::new(RELEASE),
            gcra: redis::Script::new(GCRA),
            quota_read: redis::Script::new(QUOTA_READ),
            quota_count: redis::Script::new(QUOTA_COUNT),
        })
    }

    async fn connection(&self) -> Result<RedisConnection, FastStateError> {
        let connection = self
            .connection
            .get_or_try_init(|| async {
                self.dialler
                    .connect(self.timeout)
                    .await
                    .map_err(unavailable)
            })
            .await?;
        Ok(connection.clone())
    }

    pub async fn ping(&self) -> Result<(), FastStateError> {
        let mut conn = self.connection().await?;
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T, FastStateError> {
        let mut conn = self.connection().await?;
        // The manager's response timeout bounds each attempt; this bounds the whole call.
        tokio::time::timeout(self.timeout * 2, invocation.invoke_async(&mut conn))
            .await
            .map_err(|_| FastStateError::Unavailable("Redis did not answer in time".into()))?
            .map_err(unavailable)
    }
}

#[async_trait]
impl super::NonceStore for RedisFastState {
    async fn remember(&self, key: &str, ttl: Duration) -> Result<bool, FastStateError> {
        let mut conn = self.connection().await?;
        let ttl_ms = ttl.as_millis().max(1) as u64;
        // SET NX: the first writer wins on every replica; PX bounds memory.
        let set: Option<String> = tokio::time::timeout(
            self.timeout * 2,
            redis::cmd("SET")
                .arg(key)
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query_async(&mut conn),
        )
        .await
        .map_err(|_| FastStateError::Unavailable("Redis did not answer in time".into()))?
        .map_err(unavailable)?;
        Ok(set.is_some())
    }
}

#[async_trait]
impl super::SignOuts for RedisFastState {
    async fn end(&self, key: &str, ttl: Duration) -> Result<(), FastStateError> {
        super::NonceStore::remember(self, key, ttl).await.map(drop)
    }

    async fn has_ended(&self, key: &str) -> Result<bool, FastStateError> {
        let mut conn = self.connection().await?;
        let found: i64 = tokio::time::timeout(
            self.timeout * 2,
            redis::cmd("EXISTS").arg(key).query_async(&mut conn),
        )
        .await
        .map_err(|_| FastStateError::Unavailable("Redis did not answer in time".into()))?
        .map_err(unavailable)?;
        Ok(found > 0)
    }
}

fn unavailable(e: redis::RedisError) -> FastStateError {
    FastStateError::Unavailable(e.to_string())
}

fn in_flight(owner: &str, fingerprint: &str) -> Vec<u8> {
    format!("P{owner}:{fingerprint}").into_bytes()
}

fn done(fingerprint: &str, record: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(1 + fingerprint.len() + 1 + record.len());
    value.push(b'D');
    value.extend_from_slice(fingerprint.as_bytes());
    value.push(b':');
    value.extend_from_slice(record);
    value
}

/// Decodes a stored value; `None` for something this server did not write.
fn decode(value: &[u8]) -> Option<Claim> {
    let (&tag, rest) = value.split_first()?;
    match tag {
        b'P' => {
            let text = std::str::from_utf8(rest).ok()?;
            let (_, fingerprint) = text.split_once(':')?;
            Some(Claim::InFlight {
                fingerprint: fingerprint.to_owned(),
            })
        }
        b'D' => {
            let colon = rest.iter().position(|&b| b == b':')?;
            let fingerprint = std::str::from_utf8(&rest[..colon]).ok()?.to_owned();
            Some(Claim::Done {
                fingerprint,
                record: rest[colon + 1..].to_vec(),
            })
        }
        _ => None,
    }
}

fn new_owner() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl RedisFastState {
    /// Releases the claim stored as `value` once Redis answers again, so that the retries of a
    /// request answered 503 need not wait out its lease. Only that exact value is removed: a
    /// claim another request made since is left alone. Best effort, bounded (`RELEASES_LATER`):
    /// a claim whose bytes reach Redis after the last try still waits out its lease, and a
    /// call refused for good (a script an ACL denies) spends tries that cannot succeed. The
    /// error alone cannot tell which calls ran: a cluster call whose answer was lost and whose
    /// retries then met `CLUSTERDOWN` ends with `CLUSTERDOWN`.
    fn release_later(&self, key: &str, value: Vec<u8>) {
        let (Some(connection), Ok(permit)) = (
            self.connection.get().cloned(),
            self.releases_later.clone().try_acquire_owned(),
        ) else {
            // Never connected (so nothing was claimed), or enough retries running already.
            return;
        };
        let (key, script, timeout) = (key.to_owned(), self.release.clone(), self.timeout);
        tokio::spawn(async move {
            let _permit = permit;
            let mut connection = connection;
            let mut wait = RELEASE_FIRST_WAIT;
            for _ in 0..RELEASE_TRIES {
                tokio::time::sleep(wait).await;
                let mut invocation = script.key(&key);
                invocation.arg(&value);
                let call = invocation.invoke_async::<i64>(&mut connection);
                if let Ok(Ok(_)) = tokio::time::timeout(timeout * 2, call).await {
                    return;
                }
                wait *= 2;
            }
        });
    }

    async fn claim_as(
        &self,
        key: &str,
        owner: String,
        fingerprint: &str,
        lease: Duration,
    ) -> FastResult<Claim> {
        let value = in_flight(&owner, fingerprint);
        let mut invocation = self.claim.key(key);
        invocation.arg(&value).arg(lease.as_millis() as u64);
        let existing: Option<Vec<u8>> = match self.run(invocation).await {
            Ok(existing) => existing,
            Err(e) => {
                // The script may have run with its answer lost (a master dying, a timeout):
                // the claim would then hold the key against every retry until its lease ends.
                self.release_later(key, value);
                return Err(e);
            }
        };
        match existing {
            None => Ok(Claim::Acquired { owner }),
            Some(value) => decode(&value)
                .ok_or_else(|| FastStateError::Unavailable("unreadable idempotency record".into())),
        }
    }
}

#[async_trait]
impl IdempotencyStore for RedisFastState {
    async fn claim(&self, key: &str, fingerprint: &str, lease: Duration) -> FastResult<Claim> {
        self.claim_as(key, new_owner(), fingerprint, lease).await
    }

    async fn complete(&self, held: HeldKey<'_>, record: &[u8], ttl: Duration) -> FastResult<()> {
        let (key, owner, fingerprint) = (held.key, held.owner, held.fingerprint);
        let mut invocation = self.complete.key(key);
        invocation
            .arg(in_flight(owner, fingerprint))
            .arg(done(fingerprint, record))
            .arg(ttl.as_millis() as u64);
        let _: i64 = self.run(invocation).await?;
        Ok(())
    }

    async fn release(&self, held: HeldKey<'_>) -> FastResult<()> {
        let (key, owner, fingerprint) = (held.key, held.owner, held.fingerprint);
        let value = in_flight(owner, fingerprint);
        let mut invocation = self.release.key(key);
        invocation.arg(&value);
        if let Err(e) = self.run::<i64>(invocation).await {
            self.release_later(key, value);
            return Err(e);
        }
        Ok(())
    }

    async fn discard(&self, key: &str) -> FastResult<()> {
        let mut conn = self.connection().await?;
        let _: i64 = tokio::time::timeout(
            self.timeout * 2,
            redis::cmd("DEL").arg(key).query_async(&mut conn),
        )
        .await
        .map_err(|_| FastStateError::Unavailable("Redis did not answer in time".into()))?
        .map_err(unavailable)?;
        Ok(())
    }

    async fn stored_bytes(&self, key: &str) -> FastResult<(u64, Duration)> {
        let reply: Vec<i64> = self.run(self.quota_read.key(key)).await?;
        let [bytes, left_ms] = reply[..] else {
            return Err(FastStateError::Unavailable("unexpected quota reply".into()));
        };
        Ok((
            bytes.max(0) as u64,
            Duration::from_millis(left_ms.max(0) as u64),
        ))
    }

    async fn count_stored(&self, key: &str, bytes: u64, window: Duration) -> FastResult<()> {
        let mut invocation = self.quota_count.key(key);
        invocation.arg(bytes).arg(window.as_millis().max(1) as u64);
        let _: i64 = self.run(invocation).await?;
        Ok(())
    }
}

#[async_trait]
impl RateLimiter for RedisFastState {
    async fn check(&self, buckets: &[Bucket]) -> Result<Verdict, FastStateError> {
        let mut invocation = self.gcra.prepare_invoke();
        for bucket in buckets {
            invocation
                .key(&bucket.key)
                .arg(bucket.rate.interval_ms())
                .arg(bucket.rate.burst);
        }
        let reply: Vec<i64> = self.run(invocation).await?;
        let unexpected = || FastStateError::Unavailable("unexpected rate-limit reply".into());
        let [allowed, index, remaining, retry_ms] = reply[..] else {
            return Err(unexpected());
        };
        let index = usize::try_from(index).map_err(|_| unexpected())?;
        let rate = buckets.get(index).ok_or_else(unexpected)?.rate;
        Ok(Verdict {
            decision: RateDecision {
                allowed: allowed == 1,
                limit: rate.burst,
                remaining: remaining.max(0) as u32,
                retry_after: Duration::from_millis(retry_ms.max(0) as u64),
            },
            bucket: index,
        })
    }
}

#[async_trait]
impl super::UseClaims for RedisFastState {
    /// The nonce's atomic set-if-absent, under the claim's own key.
    async fn claim_window(&self, key: &str, ttl: Duration) -> Result<bool, FastStateError> {
        super::NonceStore::remember(self, key, ttl).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::fast_state::contract;

    /// The test Redis (`TEST_REDIS_URL`, default loopback), or `None` with a skip line when it
    /// does not answer; under `CP_TEST_REQUIRE_SERVICES=1` (CI) a missing Redis fails the test.
    /// Each test gets a key namespace of its own; every key it writes carries a TTL.
    async fn open() -> Option<((), String, RedisFastState)> {
        let url =
            std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        let location = RedisLocation::parse(&url).expect("valid TEST_REDIS_URL");
        let state = RedisFastState::new(&location, Duration::from_secs(2)).expect("valid URL");
        if let Err(e) = state.ping().await {
            assert!(
                std::env::var("CP_TEST_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "Redis at {url} does not answer ({e}), and CP_TEST_REQUIRE_SERVICES=1 forbids skipping"
            );
            eprintln!("Redis at {url} does not answer; skipped");
            return None;
        }
        let ns = format!("cp-unit-{}:", uuid::Uuid::new_v4().simple());
        Some(((), ns, state))
    }

    contract::contract_tests!(open());

    /// The cluster client's retry of a claim whose answer was lost runs the script again with
    /// the same owner: it acquires (and renews the lease); any other owner still finds it held.
    #[tokio::test]
    async fn a_claim_run_again_by_its_own_call_acquires() {
        let Some((_, ns, state)) = open().await else {
            return;
        };
        let (key, lease) = (format!("{ns}claim"), Duration::from_secs(5));
        for _ in 0..2 {
            let claim = state.claim_as(&key, "one".into(), "fp", lease).await;
            assert_eq!(
                claim.ok(),
                Some(Claim::Acquired {
                    owner: "one".into()
                })
            );
        }
        let other = state.claim_as(&key, "two".into(), "fp", lease).await;
        assert_eq!(
            other.ok(),
            Some(Claim::InFlight {
                fingerprint: "fp".into()
            })
        );
    }

    /// A release made later removes the claim it names, and only that one.
    #[tokio::test]
    async fn a_release_made_later_frees_its_own_claim_only() {
        let Some((_, ns, state)) = open().await else {
            return;
        };
        let lease = Duration::from_secs(30);
        let (mine, theirs) = (format!("{ns}mine"), format!("{ns}theirs"));
        for (key, owner) in [(&mine, "one"), (&theirs, "two")] {
            let claim = state.claim_as(key, owner.into(), "fp", lease).await;
            assert_eq!(
                claim.ok(),
                Some(Claim::Acquired {
                    owner: owner.into()
                })
            );
        }
        state.release_later(&mine, in_flight("one", "fp"));
        state.release_later(&theirs, in_flight("one", "fp"));
        // The first try is 0.25 s away; a loaded Redis may take longer to answer it.
        let mut again = None;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            again = state
                .claim_as(&mine, "three".into(), "fp", lease)
                .await
                .ok();
            if matches!(again, Some(Claim::Acquired { .. })) {
                break;
            }
        }
        assert_eq!(
            again,
            Some(Claim::Acquired {
                owner: "three".into()
            })
        );
        let held = state.claim_as(&theirs, "three".into(), "fp", lease).await;
        assert_eq!(
            held.ok(),
            Some(Claim::InFlight {
                fingerprint: "fp".into()
            })
        );
    }
}
