//! The Redis adapter of the fast-state ports, on a single Redis or a Redis Cluster alike. Every
//! operation is one Lua script: one round trip, atomic, and on Redis's own clock. Each script
//! touches one key, or (the rate limit) keys of one hash tag, so each runs within one cluster
//! slot (`keys.rs` pins it). Only the connection differs (`redis_connection.rs`).

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::OnceCell;

use super::redis_connection::{RedisConnection, RedisDialler};
use super::redis_location::RedisLocation;
use super::{
    Bucket, Claim, FastResult, FastStateError, HeldKey, IdempotencyStore, RateDecision,
    RateLimiter, Verdict,
};

const CLAIM: &str = r"
local v = redis.call('GET', KEYS[1])
if v then return v end
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

pub struct RedisFastState {
    dialler: RedisDialler,
    connection: OnceCell<RedisConnection>,
    timeout: Duration,
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

#[async_trait]
impl IdempotencyStore for RedisFastState {
    async fn claim(&self, key: &str, fingerprint: &str, lease: Duration) -> FastResult<Claim> {
        let owner = new_owner();
        let mut invocation = self.claim.key(key);
        invocation
            .arg(in_flight(&owner, fingerprint))
            .arg(lease.as_millis() as u64);
        let existing: Option<Vec<u8>> = self.run(invocation).await?;
        match existing {
            None => Ok(Claim::Acquired { owner }),
            Some(value) => decode(&value)
                .ok_or_else(|| FastStateError::Unavailable("unreadable idempotency record".into())),
        }
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
        let mut invocation = self.release.key(key);
        invocation.arg(in_flight(owner, fingerprint));
        let _: i64 = self.run(invocation).await?;
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
}
