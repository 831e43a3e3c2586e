//! The in-process adapter of the fast-state ports, for a single server process. Same promises
//! as Redis on one process: TTLs, atomic claims, GCRA; expired entries are swept so memory stays
//! bounded by what is live.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{
    Bucket, Claim, FastResult, FastStateError, HeldKey, IdempotencyStore, RateLimiter, Verdict,
    gcra_all,
};

/// Sweep expired entries every this many operations.
const SWEEP_EVERY: u64 = 1024;

enum Stored {
    InFlight {
        owner: String,
        fingerprint: String,
    },
    Done {
        fingerprint: String,
        record: Vec<u8>,
    },
}

struct Entry {
    stored: Stored,
    expires: Instant,
}

pub struct MemoryFastState {
    records: Mutex<HashMap<String, Entry>>,
    /// key -> (theoretical arrival time, expiry), both in ms since `epoch`.
    rates: Mutex<HashMap<String, (u64, u64)>>,
    /// nonce key -> expiry
    nonces: Mutex<HashMap<String, Instant>>,
    /// quota key -> (bytes counted, end of the window)
    quotas: Mutex<HashMap<String, (u64, Instant)>>,
    epoch: Instant,
    operations: AtomicU64,
}

impl Default for MemoryFastState {
    fn default() -> Self {
        Self {
            records: Mutex::new(HashMap::new()),
            rates: Mutex::new(HashMap::new()),
            nonces: Mutex::new(HashMap::new()),
            quotas: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
            operations: AtomicU64::new(0),
        }
    }
}

fn poisoned() -> FastStateError {
    FastStateError::Unavailable("in-process state lock poisoned".into())
}

impl MemoryFastState {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn maybe_sweep(&self) {
        if self
            .operations
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(SWEEP_EVERY)
        {
            self.sweep();
        }
    }

    /// Drops every expired entry.
    fn sweep(&self) {
        let now = Instant::now();
        if let Ok(mut records) = self.records.lock() {
            records.retain(|_, e| e.expires > now);
        }
        let now_ms = self.now_ms();
        if let Ok(mut rates) = self.rates.lock() {
            rates.retain(|_, (_, expires)| *expires > now_ms);
        }
        if let Ok(mut nonces) = self.nonces.lock() {
            nonces.retain(|_, expires| *expires > now);
        }
        if let Ok(mut quotas) = self.quotas.lock() {
            quotas.retain(|_, (_, ends)| *ends > now);
        }
    }

    /// Live entries, for tests of eviction.
    pub fn len(&self) -> usize {
        self.records.lock().map(|r| r.len()).unwrap_or(0)
            + self.rates.lock().map(|r| r.len()).unwrap_or(0)
            + self.nonces.lock().map(|r| r.len()).unwrap_or(0)
            + self.quotas.lock().map(|r| r.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl IdempotencyStore for MemoryFastState {
    async fn claim(&self, key: &str, fingerprint: &str, lease: Duration) -> FastResult<Claim> {
        self.maybe_sweep();
        let now = Instant::now();
        let mut records = self.records.lock().map_err(|_| poisoned())?;
        if let Some(entry) = records.get(key).filter(|e| e.expires > now) {
            return Ok(match &entry.stored {
                Stored::InFlight { fingerprint, .. } => Claim::InFlight {
                    fingerprint: fingerprint.clone(),
                },
                Stored::Done {
                    fingerprint,
                    record,
                } => Claim::Done {
                    fingerprint: fingerprint.clone(),
                    record: record.clone(),
                },
            });
        }
        let owner = uuid::Uuid::new_v4().simple().to_string();
        let stored = Stored::InFlight {
            owner: owner.clone(),
            fingerprint: fingerprint.to_owned(),
        };
        records.insert(
            key.to_owned(),
            Entry {
                stored,
                expires: now + lease,
            },
        );
        Ok(Claim::Acquired { owner })
    }

    async fn complete(&self, held: HeldKey<'_>, record: &[u8], ttl: Duration) -> FastResult<()> {
        let (key, owner, fingerprint) = (held.key, held.owner, held.fingerprint);
        let now = Instant::now();
        let mut records = self.records.lock().map_err(|_| poisoned())?;
        let ours = records.get(key).is_some_and(|e| {
            e.expires > now && matches!(&e.stored, Stored::InFlight { owner: o, .. } if o == owner)
        });
        if ours {
            let stored = Stored::Done {
                fingerprint: fingerprint.to_owned(),
                record: record.to_vec(),
            };
            records.insert(
                key.to_owned(),
                Entry {
                    stored,
                    expires: now + ttl,
                },
            );
        }
        Ok(())
    }

    async fn release(&self, held: HeldKey<'_>) -> FastResult<()> {
        let (key, owner) = (held.key, held.owner);
        let mut records = self.records.lock().map_err(|_| poisoned())?;
        if records
            .get(key)
            .is_some_and(|e| matches!(&e.stored, Stored::InFlight { owner: o, .. } if o == owner))
        {
            records.remove(key);
        }
        Ok(())
    }

    async fn discard(&self, key: &str) -> FastResult<()> {
        self.records.lock().map_err(|_| poisoned())?.remove(key);
        Ok(())
    }

    async fn stored_bytes(&self, key: &str) -> FastResult<(u64, Duration)> {
        let now = Instant::now();
        let quotas = self.quotas.lock().map_err(|_| poisoned())?;
        Ok(quotas
            .get(key)
            .filter(|(_, ends)| *ends > now)
            .map_or((0, Duration::ZERO), |(bytes, ends)| (*bytes, *ends - now)))
    }

    async fn count_stored(&self, key: &str, bytes: u64, window: Duration) -> FastResult<()> {
        self.maybe_sweep();
        let now = Instant::now();
        let mut quotas = self.quotas.lock().map_err(|_| poisoned())?;
        let entry = quotas.entry(key.to_owned()).or_insert((0, now + window));
        if entry.1 <= now {
            *entry = (0, now + window);
        }
        entry.0 = entry.0.saturating_add(bytes);
        Ok(())
    }
}

#[async_trait]
impl super::NonceStore for MemoryFastState {
    async fn remember(&self, key: &str, ttl: Duration) -> Result<bool, FastStateError> {
        self.maybe_sweep();
        let now = Instant::now();
        let mut nonces = self.nonces.lock().map_err(|_| poisoned())?;
        if nonces.get(key).is_some_and(|expires| *expires > now) {
            return Ok(false);
        }
        nonces.insert(key.to_owned(), now + ttl);
        Ok(true)
    }
}

#[async_trait]
impl super::SignOuts for MemoryFastState {
    async fn end(&self, key: &str, ttl: Duration) -> Result<(), FastStateError> {
        super::NonceStore::remember(self, key, ttl).await.map(drop)
    }

    async fn has_ended(&self, key: &str) -> Result<bool, FastStateError> {
        let nonces = self.nonces.lock().map_err(|_| poisoned())?;
        Ok(nonces
            .get(key)
            .is_some_and(|expires| *expires > Instant::now()))
    }
}

#[async_trait]
impl RateLimiter for MemoryFastState {
    async fn check(&self, buckets: &[Bucket]) -> Result<Verdict, FastStateError> {
        self.maybe_sweep();
        let now = self.now_ms();
        // One lock over every bucket: the decision and the charges are one atomic step.
        let mut rates = self.rates.lock().map_err(|_| poisoned())?;
        let tats: Vec<Option<u64>> = buckets
            .iter()
            .map(|b| {
                rates
                    .get(&b.key)
                    .filter(|(_, expires)| *expires > now)
                    .map(|(tat, _)| *tat)
            })
            .collect();
        let limits: Vec<_> = buckets.iter().map(|b| b.rate).collect();
        let (verdict, new_tats) = gcra_all(now, &tats, &limits);
        for (bucket, tat) in buckets.iter().zip(new_tats.unwrap_or_default()) {
            rates.insert(bucket.key.clone(), (tat, tat));
        }
        Ok(verdict)
    }
}

#[async_trait]
impl super::UseClaims for MemoryFastState {
    /// The nonce's atomic set-if-absent, under the claim's own key.
    async fn claim_window(&self, key: &str, ttl: Duration) -> Result<bool, FastStateError> {
        super::NonceStore::remember(self, key, ttl).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::storage::fast_state::contract;

    contract::contract_tests!(async { Some(((), String::new(), MemoryFastState::default())) });

    #[tokio::test]
    async fn expired_entries_are_free_and_swept() {
        let state = MemoryFastState::default();
        let short = Duration::from_millis(1);
        for i in 0..10 {
            state.claim(&format!("k{i}"), "fp", short).await.unwrap();
            let bucket = Bucket {
                key: format!("r{i}"),
                rate: super::super::Rate {
                    burst: 1,
                    period: short,
                },
            };
            let _ = state.check(&[bucket]).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(matches!(
            state.claim("k0", "fp", short).await.unwrap(),
            Claim::Acquired { .. }
        ));
        assert_eq!(state.len(), 20, "expired entries linger until a sweep");
        tokio::time::sleep(Duration::from_millis(5)).await;
        state.sweep();
        assert!(state.is_empty(), "swept, left {}", state.len());
    }
}
