use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, Store, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::Instances;
use super::budget::{Limiter, PeakMemory};
use super::memo::{AllowMemo, MAX_SHARES, SHARE_BYTES};
use super::moderation::{ModerationInput, ModerationOutcome, outcome};
use super::settings::{EngineSettings, InstanceAllocation, pool};
use super::slots::{DecisionSlots, NoSlot, Slot};
use super::ticker::{EPOCH_TICK, Ticker};
use super::warm::{Warm, WarmPool};
use super::wit::{
    self, AuthzInput, authorizer, authorizer_v1_0, authz_types, moderation_types, moderator,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    Authorizer,
    Moderator,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 2] = [PolicyKind::Authorizer, PolicyKind::Moderator];

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Authorizer => "authorizer",
            PolicyKind::Moderator => "moderator",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw {
            "authorizer" => Ok(PolicyKind::Authorizer),
            "moderator" => Ok(PolicyKind::Moderator),
            other => Err(format!(
                "unknown policy kind {other:?}: expected authorizer or moderator"
            )),
        }
    }
}

/// Shadow evaluations run one at a time on each of this many workers, with their own instances
/// and never an active decision's slot.
pub(super) const SHADOW_WORKERS: usize = 2;

/// Why a decision could not be made; the caller fails closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyFailure {
    #[error("the policy ran past its time budget")]
    Timeout,
    #[error("the policy ran out of its memory budget")]
    Memory,
    #[error("the policy trapped: {0}")]
    Trap(String),
    #[error("the policy could not be instantiated: {0}")]
    Instantiate(String),
    #[error("the policy engine is unavailable: {0}")]
    Unavailable(String),
}

/// What a store needs: a WASI context with no capability at all, and the memory limiter.
pub struct Sandbox {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: Limiter,
}

/// Where one decision's time went and the linear memory it took, for profiling guests.
#[derive(Debug, Clone, Copy, Default)]
pub struct DecisionProfile {
    /// A fresh instance from the `InstancePre`: memory images mapped, tables, start functions.
    pub instantiate: Duration,
    /// The exported function, arguments and result included.
    pub call: Duration,
    /// Dropping the store: the pool resets the slot's memory for the next decision.
    pub release: Duration,
    /// The largest linear memory of the instance, in bytes.
    pub largest_memory: usize,
    /// All its linear memories together, in bytes.
    pub total_memory: usize,
    /// It ran in a warm instance that had decided before.
    pub reused: bool,
}

/// How policies got their native code in this engine, counted since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NativeCodeCounts {
    /// Compiled with cranelift.
    pub compiled: u64,
    /// Deserialized from the disk cache.
    pub from_disk: u64,
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

enum Pre {
    Authorizer(authorizer::AuthorizerPre<Sandbox>),
    /// Built against `control-plane:policy@1.0.0`: asked without the principal's role.
    AuthorizerV1_0(authorizer_v1_0::AuthorizerPre<Sandbox>),
    Moderator(moderator::ModeratorPre<Sandbox>),
}

/// An instance's exports, bound in its store.
pub(super) enum Bound {
    Authorizer(authorizer::Authorizer),
    AuthorizerV1_0(authorizer_v1_0::Authorizer),
    Moderator(moderator::Moderator),
}

/// A warm instance checked out for one decision: dropped with the decision's future unless
/// its call returned and it was taken back out.
struct Checkout<'a> {
    warm: Option<Warm>,
    pool: &'a WarmPool,
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if self.warm.take().is_some() {
            self.pool.note_failure();
        }
    }
}

/// Identifies a compiled policy among others with the same bytes (warm instances' key).
static NEXT_POLICY_UID: AtomicU64 = AtomicU64::new(1);

/// A policy compiled once and ready to instantiate.
pub struct CompiledPolicy {
    pub kind: PolicyKind,
    pub digest: String,
    /// The memory budget of this version's decisions (`budget.rs`).
    pub(super) memory_bytes: usize,
    /// Fresh instances, or warm ones per organisation; chosen at install.
    pub(super) instances: super::Instances,
    /// This compilation's own identity: warm instances of it serve it alone.
    pub(super) uid: u64,
    pre: Pre,
    /// The allows of the built-in authorizer, remembered; `None` for every other policy.
    pub(super) memo: Option<AllowMemo>,
}

impl CompiledPolicy {
    /// This version's decisions in warm instances per organisation, or fresh ones.
    pub fn with_instances(mut self, instances: super::Instances) -> Self {
        self.instances = instances;
        self
    }

    pub fn instances(&self) -> super::Instances {
        self.instances
    }
}

impl std::fmt::Debug for CompiledPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompiledPolicy({} {})", self.kind.as_str(), self.digest)
    }
}

/// One engine for the process: compiles policies and runs decisions within their budgets.
pub struct PolicyEngine {
    engine: Engine,
    linker: Linker<Sandbox>,
    ticker: Arc<Ticker>,
    settings: EngineSettings,
    slots: DecisionSlots,
    warm: WarmPool,
    disk: Option<super::native_cache::NativeCache>,
    compiled: AtomicU64,
    from_disk: AtomicU64,
}

/// Address space per linear memory: all a 32-bit index reaches (wasmtime's 64-bit default), so
/// only an access whose static offset passes the guard keeps a bounds check: a JavaScript call
/// is 14% faster (BENCHMARKS.md). About 16 GiB of 128 TiB per pool slot; not memory.
const MEMORY_RESERVATION: u64 = 4 << 30;
const MEMORY_GUARD: u64 = 32 << 20;

/// Native code of components compiled in this process, by (digest, engine compatibility).
type NativeCache = std::sync::Mutex<std::collections::HashMap<(String, u64), Vec<u8>>>;
static PRECOMPILED: std::sync::LazyLock<NativeCache> = std::sync::LazyLock::new(Default::default);

impl PolicyEngine {
    pub fn new(settings: EngineSettings) -> Result<Arc<Self>, String> {
        // Active slots, shadow workers, and headroom for the built-in authorizer, which runs in
        // place on the async workers.
        // and every warm instance, idle or not, which keeps its slot.
        let slots = (settings.max_concurrent + SHADOW_WORKERS + settings.warm.total) as u32 + 8;
        let config = |pagemap_scan: bool| {
            let mut config = Config::new();
            match settings.allocation {
                InstanceAllocation::Pooling => {
                    config
                        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool(
                            slots,
                            super::budget::pool_memory_bytes(&settings),
                            settings.memory_bytes,
                            pagemap_scan,
                        )))
                        .memory_init_cow(true);
                }
                InstanceAllocation::OnDemand => {
                    config
                        .allocation_strategy(InstanceAllocationStrategy::OnDemand)
                        .memory_init_cow(false);
                }
            }
            config
                .epoch_interruption(true)
                .memory_reservation(
                    MEMORY_RESERVATION.max(super::budget::pool_memory_bytes(&settings) as u64),
                )
                .memory_guard_size(MEMORY_GUARD);
            config
        };
        // PAGEMAP_SCAN is asked for, and the engine refuses it where the kernel lacks it.
        let engine = Engine::new(&config(true))
            .or_else(|_| Engine::new(&config(false)))
            .map_err(|e| format!("could not create the wasm engine: {e}"))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| format!("could not link WASI: {e}"))?;

        let ticker = Ticker::start(&engine)?;
        let slots = DecisionSlots::new(settings.max_concurrent);
        let warm = WarmPool::new(settings.warm)
            .map_err(|e| format!("could not count warm policy instances: {e}"))?;
        let disk = settings.cache_dir.as_deref().and_then(|dir| {
            super::native_cache::NativeCache::open(dir)
                .inspect_err(|e| {
                    tracing::warn!(
                        error = %e,
                        "policy native code is not cached on disk: every start compiles"
                    )
                })
                .ok()
        });
        Ok(Arc::new(Self {
            engine,
            linker,
            ticker,
            settings,
            slots,
            warm,
            disk,
            compiled: AtomicU64::new(0),
            from_disk: AtomicU64::new(0),
        }))
    }

    /// How policies got their native code in this engine so far.
    pub fn native_code_counts(&self) -> NativeCodeCounts {
        NativeCodeCounts {
            compiled: self.compiled.load(Ordering::Relaxed),
            from_disk: self.from_disk.load(Ordering::Relaxed),
        }
    }

    /// Epoch ticks given so far (`ticker.rs`).
    #[cfg(test)]
    pub(super) fn epoch_ticks(&self) -> u64 {
        self.ticker.ticks()
    }

    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    /// Compiles `bytes` and checks that it implements the world of `kind`. The error is a
    /// sentence for the person installing the policy.
    pub fn compile(&self, kind: PolicyKind, bytes: &[u8]) -> Result<CompiledPolicy, String> {
        if !bytes.starts_with(b"\0asm") {
            return Err("not a WebAssembly component (no \\0asm header)".into());
        }
        if bytes.get(4..8) == Some(&[1, 0, 0, 0]) {
            return Err(
                "a core WebAssembly module, not a component: build for wasm32-wasip2".into(),
            );
        }
        let component = self.component(bytes)?;
        let instance_pre = self.linker.instantiate_pre(&component).map_err(|e| {
            format!("the component imports something a policy may not use (only WASI 0.2 is provided): {e:#}")
        })?;
        let pre = match kind {
            // The export is typed by its shape, so a 1.0.0 authorizer (whose principal has no
            // role) fails the 1.1.0 check and passes its own.
            PolicyKind::Authorizer => authorizer::AuthorizerPre::new(instance_pre.clone())
                .map(Pre::Authorizer)
                .or_else(|e| {
                    authorizer_v1_0::AuthorizerPre::new(instance_pre)
                        .map(Pre::AuthorizerV1_0)
                        .map_err(|_| e)
                }),
            PolicyKind::Moderator => moderator::ModeratorPre::new(instance_pre).map(Pre::Moderator),
        }
        .map_err(|e| {
            format!(
                "the component does not implement the control-plane:policy/{} world: {e:#}",
                kind.as_str()
            )
        })?;
        let digest = super::digest(bytes);
        let memo = (kind == PolicyKind::Authorizer && is_builtin(&digest))
            .then(|| AllowMemo::new(SHARE_BYTES, MAX_SHARES));
        Ok(CompiledPolicy {
            kind,
            digest,
            memory_bytes: self.settings.memory_bytes,
            instances: super::Instances::Fresh,
            uid: NEXT_POLICY_UID.fetch_add(1, Ordering::Relaxed),
            pre,
            memo,
        })
    }

    /// Compiles once: with a cache directory, later processes (replicas, `cpctl policies test`)
    /// deserialize the native code written there; without one, later engines of this process
    /// with the same configuration reuse it from memory.
    fn component(&self, bytes: &[u8]) -> Result<Component, String> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.engine
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        let engine_hash = hasher.finish();
        let digest = super::digest(bytes);
        if let Some(disk) = &self.disk {
            if let Some(native) = disk.load(&digest, engine_hash) {
                // SAFETY: the file is this user's, in a directory nobody else can write, names
                // this component's digest and this engine's compatibility hash, and its payload
                // has the SHA-256 written with it by `Component::serialize`'s caller below.
                if let Ok(component) = unsafe { Component::deserialize(&self.engine, &native) } {
                    self.from_disk.fetch_add(1, Ordering::Relaxed);
                    return Ok(component);
                }
            }
            let component = self.compile_native(bytes)?;
            if let Ok(native) = component.serialize()
                && let Err(e) = disk.store(&digest, engine_hash, &native)
            {
                tracing::warn!(error = %e, "could not cache a policy's native code");
            }
            return Ok(component);
        }
        let key = (digest, engine_hash);
        let cached = PRECOMPILED.lock().ok().and_then(|c| c.get(&key).cloned());
        if let Some(native) = cached {
            // SAFETY: these bytes were produced by `Component::serialize` in this process, for an
            // engine with the same compatibility hash; they never left memory.
            if let Ok(component) = unsafe { Component::deserialize(&self.engine, &native) } {
                return Ok(component);
            }
        }
        let component = self.compile_native(bytes)?;
        if let (Ok(native), Ok(mut cache)) = (component.serialize(), PRECOMPILED.lock()) {
            cache.insert(key, native);
        }
        Ok(component)
    }

    fn compile_native(&self, bytes: &[u8]) -> Result<Component, String> {
        let component = Component::from_binary(&self.engine, bytes)
            .map_err(|e| format!("not a valid component: {e:#}"))?;
        self.compiled.fetch_add(1, Ordering::Relaxed);
        Ok(component)
    }

    fn store(&self, limits: Limiter) -> Store<Sandbox> {
        let sandbox = Sandbox {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
            limits,
        };
        let mut store = Store::new(&self.engine, sandbox);
        store.limiter(|s| &mut s.limits);
        store
    }

    /// Gives guest code in `store` the deadline, counted in ticks from now; re-armed before
    /// every call of a warm instance.
    fn arm(&self, store: &mut Store<Sandbox>) {
        let ticks =
            (self.settings.deadline.as_millis() as u64 / EPOCH_TICK.as_millis() as u64).max(1) + 1;
        store.set_epoch_deadline(ticks);
    }

    async fn instantiate(
        &self,
        policy: &CompiledPolicy,
        store: &mut Store<Sandbox>,
    ) -> Result<Bound, PolicyFailure> {
        match &policy.pre {
            Pre::Authorizer(pre) => pre.instantiate_async(store).await.map(Bound::Authorizer),
            Pre::AuthorizerV1_0(pre) => pre
                .instantiate_async(store)
                .await
                .map(Bound::AuthorizerV1_0),
            Pre::Moderator(pre) => pre.instantiate_async(store).await.map(Bound::Moderator),
        }
        .map_err(classify_instantiate)
    }

    /// Runs `decision` within the wall-clock deadline. The epoch deadline (set on the store)
    /// interrupts guest code; this timer interrupts everything else, in particular a host call
    /// the guest blocks in (a WASI clock wait): the future is dropped and the store with it.
    async fn within_deadline<T>(
        &self,
        decision: impl Future<Output = Result<T, PolicyFailure>>,
    ) -> Result<T, PolicyFailure> {
        tokio::time::timeout(self.settings.deadline, decision)
            .await
            .unwrap_or(Err(PolicyFailure::Timeout))
    }

    /// One decision within the deadline, on the calling task: `call` asks an instance of
    /// `policy`, a fresh one unless the policy keeps warm instances and the decision is of an
    /// `organisation` (`warm.rs`). A failure to instantiate is told apart from one of the call.
    async fn run<T>(
        &self,
        policy: &CompiledPolicy,
        organisation: Option<Uuid>,
        peak: Option<&PeakMemory>,
        call: impl AsyncFnOnce(&Bound, &mut Store<Sandbox>) -> wasmtime::Result<T>,
    ) -> Result<(T, DecisionProfile), PolicyFailure> {
        self.within_deadline(async {
            // The epoch runs while a decision does; idle warm stores do not keep it awake.
            let _ticking = self.ticker.ticking();
            match organisation.filter(|_| policy.instances == Instances::PerOrganisation) {
                None => self.run_fresh(policy, peak, call).await,
                Some(organisation) => self.run_warm(policy, organisation, call).await,
            }
        })
        .await
    }

    async fn run_fresh<T>(
        &self,
        policy: &CompiledPolicy,
        peak: Option<&PeakMemory>,
        call: impl AsyncFnOnce(&Bound, &mut Store<Sandbox>) -> wasmtime::Result<T>,
    ) -> Result<(T, DecisionProfile), PolicyFailure> {
        let started = Instant::now();
        let mut store = self.store(Limiter::new(policy.memory_bytes, peak));
        self.arm(&mut store);
        let bound = self.instantiate(policy, &mut store).await?;
        let instantiated = Instant::now();
        let result = call(&bound, &mut store).await.map_err(classify)?;
        let called = Instant::now();
        let (largest_memory, total_memory) = store.data().limits.sizes();
        drop(store);
        let profile = DecisionProfile {
            instantiate: instantiated - started,
            call: called - instantiated,
            release: called.elapsed(),
            largest_memory,
            total_memory,
            reused: false,
        };
        Ok((result, profile))
    }

    async fn run_warm<T>(
        &self,
        policy: &CompiledPolicy,
        organisation: Uuid,
        call: impl AsyncFnOnce(&Bound, &mut Store<Sandbox>) -> wasmtime::Result<T>,
    ) -> Result<(T, DecisionProfile), PolicyFailure> {
        let started = Instant::now();
        let taken = self.warm.take(policy.uid, organisation);
        let reused = taken.is_some();
        let warm = match taken {
            Some(warm) => warm,
            None => {
                let counted = self.warm.admit(organisation);
                let mut store = self.store(Limiter::new(policy.memory_bytes, None));
                self.arm(&mut store);
                let bound = self.instantiate(policy, &mut store).await?;
                Warm::new(store, bound, counted)
            }
        };
        // Dropped, never given back, unless the call returns: a trap, a deadline (this future
        // dropped) or any other failure ends the instance.
        let mut checkout = Checkout {
            warm: Some(warm),
            pool: &self.warm,
        };
        let instantiated = Instant::now();
        let warm = checkout.warm.as_mut().expect("checked out");
        self.arm(&mut warm.store);
        let before = warm.store.data().limits.sizes();
        let result = call(&warm.bound, &mut warm.store).await.map_err(classify)?;
        let called = Instant::now();
        let (largest_memory, total_memory) = warm.store.data().limits.sizes();
        let grew = (largest_memory, total_memory) != before;
        let warm = checkout.warm.take().expect("checked out");
        self.warm.give_back(policy.uid, organisation, warm, grew);
        let profile = DecisionProfile {
            instantiate: instantiated - started,
            call: called - instantiated,
            release: called.elapsed(),
            largest_memory,
            total_memory,
            reused,
        };
        Ok((result, profile))
    }

    /// The policy versions in force: warm instances of any other are retired.
    pub(super) fn keep_warm_only(&self, in_force: &[&CompiledPolicy]) {
        let ids: Vec<u64> = in_force.iter().map(|p| p.uid).collect();
        self.warm.keep_only(&ids);
    }

    /// Gauges and counters of the warm instances, for the metrics endpoint.
    pub(super) fn warm_collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        self.warm.collectors()
    }

    /// Instances alive (idle or deciding), in all and of `organisation`.
    #[cfg(test)]
    pub(super) fn warm_counts(&self, organisation: Uuid) -> (usize, usize) {
        self.warm.counts(organisation)
    }

    #[cfg(test)]
    pub(super) fn warm(&self) -> &WarmPool {
        &self.warm
    }

    /// One authorization decision of `organisation` (warm instances when the policy keeps
    /// them; a fresh one without an organisation), with where its time went.
    async fn authorize_in(
        &self,
        policy: &CompiledPolicy,
        request: &authz_types::AuthzRequest,
        organisation: Option<Uuid>,
        peak: Option<&PeakMemory>,
    ) -> Result<(authz_types::AuthzDecision, DecisionProfile), PolicyFailure> {
        if matches!(policy.pre, Pre::Moderator(_)) {
            return Err(PolicyFailure::Instantiate("not an authorizer".into()));
        }
        // Converted once, before the instance is taken: the 1.0.0 world has no role.
        let request_v1_0 =
            matches!(policy.pre, Pre::AuthorizerV1_0(_)).then(|| wit::request_v1_0(request));
        self.run(
            policy,
            organisation,
            peak,
            async |bound, store| match bound {
                Bound::Authorizer(instance) => instance.call_authorize(store, request).await,
                Bound::AuthorizerV1_0(instance) => {
                    let request = request_v1_0.as_ref().expect("converted for 1.0.0");
                    let decision = instance.call_authorize(store, request).await?;
                    Ok(wit::decision_from_v1_0(decision))
                }
                Bound::Moderator(_) => Err(wasmtime::Error::msg("not an authorizer")),
            },
        )
        .await
    }

    /// One authorization decision as [`Self::authorize_now`] makes it, with where its time
    /// went, for benchmarks and profiling.
    #[doc(hidden)]
    pub async fn authorize_profiled(
        &self,
        policy: &CompiledPolicy,
        request: &authz_types::AuthzRequest,
    ) -> Result<(authz_types::AuthzDecision, DecisionProfile), PolicyFailure> {
        self.authorize_in(policy, request, None, None).await
    }

    /// [`Self::authorize_profiled`] for `organisation`, in its warm instances when the policy
    /// keeps them, for benchmarks and profiling.
    #[doc(hidden)]
    pub async fn authorize_profiled_for(
        &self,
        policy: &CompiledPolicy,
        request: &authz_types::AuthzRequest,
        organisation: Uuid,
    ) -> Result<(authz_types::AuthzDecision, DecisionProfile), PolicyFailure> {
        self.authorize_in(policy, request, Some(organisation), None)
            .await
    }

    /// One authorization decision in a fresh instance, on the calling task and within the
    /// deadline, without a decision slot (the case runner and benchmarks call it directly).
    pub async fn authorize_now(
        &self,
        policy: &CompiledPolicy,
        request: &authz_types::AuthzRequest,
    ) -> Result<authz_types::AuthzDecision, PolicyFailure> {
        self.authorize_with(policy, request, None).await
    }

    /// [`Self::authorize_now`], recording the largest memory the decision asked for in `peak`.
    pub(super) async fn authorize_with(
        &self,
        policy: &CompiledPolicy,
        request: &authz_types::AuthzRequest,
        peak: Option<&PeakMemory>,
    ) -> Result<authz_types::AuthzDecision, PolicyFailure> {
        self.authorize_in(policy, request, None, peak)
            .await
            .map(|(decision, _)| decision)
    }

    /// One moderation decision in a fresh instance, on the calling task and within the
    /// deadline, without a decision slot.
    pub async fn moderate_now(
        &self,
        policy: &CompiledPolicy,
        request: &moderation_types::ModerationRequest,
    ) -> Result<moderation_types::ModerationDecision, PolicyFailure> {
        self.moderate_with(policy, request, None).await
    }

    /// [`Self::moderate_now`], recording the largest memory the decision asked for in `peak`.
    pub(super) async fn moderate_with(
        &self,
        policy: &CompiledPolicy,
        request: &moderation_types::ModerationRequest,
        peak: Option<&PeakMemory>,
    ) -> Result<moderation_types::ModerationDecision, PolicyFailure> {
        self.moderate_in(policy, request, None, peak).await
    }

    async fn moderate_in(
        &self,
        policy: &CompiledPolicy,
        request: &moderation_types::ModerationRequest,
        organisation: Option<Uuid>,
        peak: Option<&PeakMemory>,
    ) -> Result<moderation_types::ModerationDecision, PolicyFailure> {
        if !matches!(policy.pre, Pre::Moderator(_)) {
            return Err(PolicyFailure::Instantiate("not a moderator".into()));
        }
        self.run(
            policy,
            organisation,
            peak,
            async |bound, store| match bound {
                Bound::Moderator(instance) => instance.call_moderate(store, request).await,
                _ => Err(wasmtime::Error::msg("not a moderator")),
            },
        )
        .await
        .map(|(decision, _)| decision)
    }

    /// Waits for a decision slot for `organisation`, at most `queue_timeout`: a decision that
    /// cannot start in time fails as unavailable rather than queueing without bound. Freed
    /// slots go to organisations in turn (`slots.rs`).
    async fn slot(&self, organisation: Uuid) -> Result<Slot, PolicyFailure> {
        self.slots
            .acquire(organisation, self.settings.queue_timeout)
            .await
            .map_err(|NoSlot| {
                PolicyFailure::Unavailable(format!(
                    "no decision slot was free within {} ms",
                    self.settings.queue_timeout.as_millis()
                ))
            })
    }

    /// Runs `decision` off the async workers, holding `slot` if given: an installed policy may
    /// spin to its deadline, and guest code runs inside `poll`, so it gets a blocking thread
    /// that drives the future (host waits included) to the end.
    async fn on_blocking_thread<T: Send + 'static>(
        slot: Option<Slot>,
        decision: impl Future<Output = Result<T, PolicyFailure>> + Send + 'static,
    ) -> Result<T, PolicyFailure> {
        let timers = DECISION_TIMERS
            .as_ref()
            .map_err(|e| PolicyFailure::Unavailable(e.clone()))?
            .handle()
            .clone();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            timers.block_on(decision)
        })
        .await
        .map_err(|e| PolicyFailure::Unavailable(e.to_string()))?
    }

    /// Authorizes in a fresh instance: the built-in authorizer in place on the request's task,
    /// any other policy in a decision slot off the async workers.
    pub async fn authorize(
        self: &Arc<Self>,
        policy: Arc<CompiledPolicy>,
        input: &AuthzInput,
    ) -> Result<authz_types::AuthzDecision, PolicyFailure> {
        let request = input.to_wit();
        if is_builtin(&policy.digest) {
            // This repository's own policy, built with the server: a decision takes a few
            // microseconds (BENCHMARKS.md), less than the hop to a blocking thread and back. An
            // installed policy may spin to its deadline, so it never runs on an async worker.
            return self.authorize_in_place(&policy, &request).await;
        }
        let organisation = input.principal.organisation_id;
        let slot = self.slot(organisation).await?;
        let engine = self.clone();
        Self::on_blocking_thread(Some(slot), async move {
            engine
                .authorize_in(&policy, &request, Some(organisation), None)
                .await
                .map(|(decision, _)| decision)
        })
        .await
    }

    /// A built-in policy's decision on the calling task, from its memo when it allowed the same
    /// request before (`memo.rs`).
    pub(super) async fn authorize_in_place(
        &self,
        policy: &CompiledPolicy,
        request: &authz_types::AuthzRequest,
    ) -> Result<authz_types::AuthzDecision, PolicyFailure> {
        let Some(memo) = &policy.memo else {
            return self.authorize_now(policy, request).await;
        };
        if memo.allows(request) {
            return Ok(authz_types::AuthzDecision::Allow);
        }
        let decision = self.authorize_now(policy, request).await;
        if decision == Ok(authz_types::AuthzDecision::Allow) {
            memo.remember(request);
        }
        decision
    }

    /// Authorizes for a shadow worker: in place or off the async workers as [`Self::authorize`]
    /// does, but without a decision slot; the fixed number of shadow workers is the bound.
    pub(super) async fn authorize_shadow(
        self: &Arc<Self>,
        policy: Arc<CompiledPolicy>,
        input: &AuthzInput,
    ) -> Result<authz_types::AuthzDecision, PolicyFailure> {
        let request = input.to_wit();
        if is_builtin(&policy.digest) {
            return self.authorize_in_place(&policy, &request).await;
        }
        let organisation = input.principal.organisation_id;
        let engine = self.clone();
        Self::on_blocking_thread(None, async move {
            engine
                .authorize_in(&policy, &request, Some(organisation), None)
                .await
                .map(|(decision, _)| decision)
        })
        .await
    }

    /// Moderates in a fresh instance, in a decision slot of `organisation` (whose review or
    /// report it is) off the async workers.
    pub async fn moderate(
        self: &Arc<Self>,
        policy: Arc<CompiledPolicy>,
        input: &ModerationInput,
        organisation: Uuid,
    ) -> Result<ModerationOutcome, PolicyFailure> {
        let request = input.to_wit();
        let slot = self.slot(organisation).await?;
        let engine = self.clone();
        Self::on_blocking_thread(Some(slot), async move {
            engine
                .moderate_in(&policy, &request, Some(organisation), None)
                .await
        })
        .await
        .map(outcome)
    }
}

/// The timers of decisions on blocking threads (their deadline, WASI clock waits): a runtime of
/// the engine's own, which lives as long as the process. The server's runtime would do until it
/// shuts down with a decision in flight (a shadow evaluation, say): its timer goes first, and
/// the decision would panic rather than end at its deadline.
static DECISION_TIMERS: std::sync::LazyLock<Result<tokio::runtime::Runtime, String>> =
    std::sync::LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("policy-timers")
            .enable_time()
            .build()
            .map_err(|e| format!("could not start the policy timers: {e}"))
    });

/// Is this the digest of a policy built into the server?
fn is_builtin(digest: &str) -> bool {
    static BUILTIN: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
        [
            super::digest(super::defaults::AUTHORIZER),
            super::digest(super::defaults::MODERATOR),
        ]
    });
    BUILTIN.iter().any(|d| d == digest)
}

fn classify(e: wasmtime::Error) -> PolicyFailure {
    if let Some(trap) = e.downcast_ref::<Trap>() {
        return match trap {
            Trap::Interrupt => PolicyFailure::Timeout,
            other => PolicyFailure::Trap(other.to_string()),
        };
    }
    let message = format!("{e:#}");
    if message.contains("growing memory") || message.contains("memory") && message.contains("limit")
    {
        PolicyFailure::Memory
    } else {
        PolicyFailure::Trap(message)
    }
}

fn classify_instantiate(e: wasmtime::Error) -> PolicyFailure {
    match classify(e) {
        PolicyFailure::Trap(message) => PolicyFailure::Instantiate(message),
        other => other,
    }
}
