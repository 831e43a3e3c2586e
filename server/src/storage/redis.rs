//! The Redis adapter of the fast-state ports. Every operation is one Lua script: one round
//! trip, atomic, and on Redis's own clock. Each script touches one key, so `REDIS_URL` may name
//! a cluster node as long as keys are routed (see README).

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use super::fast::{Claim, FastStateError, IdempotencyStore, Rate, RateDecision, RateLimiter};

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

const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - burst * interval
if allow_at > now then
  return {0, 0, allow_at - now}
end
redis.call('SET', KEYS[1], new_tat, 'PX', new_tat - now)
local remaining = math.floor((now - allow_at) / interval)
if remaining > burst - 1 then remaining = burst - 1 end
return {1, remaining, 0}
";

pub struct RedisFastState {
    client: redis::Client,
    connection: OnceCell<ConnectionManager>,
    timeout: Duration,
    claim: redis::Script,
    complete: redis::Script,
    release: redis::Script,
    gcra: redis::Script,
}

impl RedisFastState {
    /// Nothing is dialled until first use, so the server starts (and recovers) while Redis is down.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, FastStateError> {
        let client = redis::Client::open(url)
            .map_err(|e| FastStateError::Unavailable(format!("invalid REDIS_URL: {e}")))?;
        Ok(Self {
            client,
            connection: OnceCell::new(),
            timeout,
            claim: redis::Script::new(CLAIM),
            complete: redis::Script::new(COMPLETE),
            release: redis::Script::new(RELEASE),
            gcra: redis::Script::new(GCRA),
        })
    }

    async fn connection(&self) -> Result<ConnectionManager, FastStateError> {
        let manager = self
            .connection
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout))
                    .set_number_of_retries(1);
                tokio::time::timeout(
                    self.timeout,
                    ConnectionManager::new_with_config(self.client.clone(), config),
                )
                .await
                .map_err(|_| FastStateError::Unavailable("timed out connecting to Redis".into()))?
                .map_err(unavailable)
            })
            .await?;
        Ok(manager.clone())
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
impl super::fast::NonceStore for RedisFastState {
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
    async fn claim(
        &self,
        key: &str,
        fingerprint: &str,
        lease: Duration,
    ) -> Result<Claim, FastStateError> {
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

    async fn complete(
        &self,
        key: &str,
        owner: &str,
        fingerprint: &str,
        record: &[u8],
        ttl: Duration,
    ) -> Result<(), FastStateError> {
        let mut invocation = self.complete.key(key);
        invocation
            .arg(in_flight(owner, fingerprint))
            .arg(done(fingerprint, record))
            .arg(ttl.as_millis() as u64);
        let _: i64 = self.run(invocation).await?;
        Ok(())
    }

    async fn release(
        &self,
        key: &str,
        owner: &str,
        fingerprint: &str,
    ) -> Result<(), FastStateError> {
        let mut invocation = self.release.key(key);
        invocation.arg(in_flight(owner, fingerprint));
        let _: i64 = self.run(invocation).await?;
        Ok(())
    }

    async fn discard(&self, key: &str) -> Result<(), FastStateError> {
        let mut conn = self.connection().await?;
        let _: i64 = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

#[async_trait]
impl RateLimiter for RedisFastState {
    async fn check(&self, key: &str, rate: Rate) -> Result<RateDecision, FastStateError> {
        let mut invocation = self.gcra.key(key);
        invocation.arg(rate.interval_ms()).arg(rate.burst);
        let reply: Vec<i64> = self.run(invocation).await?;
        let [allowed, remaining, retry_ms] = reply[..] else {
            return Err(FastStateError::Unavailable(
                "unexpected rate-limit reply".into(),
            ));
        };
        Ok(RateDecision {
            allowed: allowed == 1,
            limit: rate.burst,
            remaining: remaining.max(0) as u32,
            retry_after: Duration::from_millis(retry_ms.max(0) as u64),
        })
    }
}
