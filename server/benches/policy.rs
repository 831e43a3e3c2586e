//! One policy decision, as the server makes it: a fresh instance from the `InstancePre`,
//! one call on a fiber under the deadline's timer, the store dropped. Each decision is driven by
//! `block_on` on a current-thread runtime, as the built-in authorizer is awaited in place. Criterion measures the mean; the percentiles the targets are
//! stated in (p50 <= 10 us, p99 <= 50 us) come from 100,000 timed decisions afterwards.
//!
//!     cargo bench -p control-plane --bench policy

use std::hint::black_box;
use std::time::{Duration, Instant};

use control_plane::policy::{EngineSettings, PolicyEngine, PolicyKind, bench_support, defaults};
use criterion::Criterion;

fn main() {
    let engine = PolicyEngine::new(EngineSettings {
        max_concurrent: 4,
        ..EngineSettings::default()
    })
    .expect("engine");
    let authz = engine
        .compile(PolicyKind::Authorizer, defaults::AUTHORIZER)
        .expect("authorizer");
    let moderation = engine
        .compile(PolicyKind::Moderator, defaults::MODERATOR)
        .expect("moderator");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let authz_request = bench_support::authz_request();
    let moderation_request = bench_support::moderation_request();

    let mut criterion = Criterion::default()
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    criterion.bench_function("authorizer decision (fresh instance)", |b| {
        b.iter(|| {
            black_box(
                runtime
                    .block_on(engine.authorize_now(&authz, black_box(&authz_request)))
                    .expect("decides"),
            )
        })
    });
    criterion.bench_function("moderator decision (fresh instance)", |b| {
        b.iter(|| {
            black_box(
                runtime
                    .block_on(engine.moderate_now(&moderation, black_box(&moderation_request)))
                    .expect("decides"),
            )
        })
    });
    criterion.final_summary();

    // `cargo test --benches` runs this binary with --bench absent: keep that quick.
    let samples = if std::env::args().any(|a| a == "--bench") {
        100_000
    } else {
        100
    };
    let report = |name: &str, mut decide: Box<dyn FnMut()>| {
        for _ in 0..samples / 10 {
            decide();
        }
        let mut times: Vec<Duration> = (0..samples)
            .map(|_| {
                let started = Instant::now();
                decide();
                started.elapsed()
            })
            .collect();
        times.sort();
        let p = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
        println!(
            "{name}: {samples} decisions, p50 {:?}, p99 {:?}, max {:?}",
            p(0.50),
            p(0.99),
            times[times.len() - 1]
        );
    };
    report(
        "authorizer",
        Box::new(|| {
            black_box(
                runtime
                    .block_on(engine.authorize_now(&authz, &authz_request))
                    .expect("decides"),
            );
        }),
    );
    report(
        "moderator",
        Box::new(|| {
            black_box(
                runtime
                    .block_on(engine.moderate_now(&moderation, &moderation_request))
                    .expect("decides"),
            );
        }),
    );
}
