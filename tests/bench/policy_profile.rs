//! Where a policy's time goes, per component: compilation (once), loading the native code
//! from the disk cache (once per process), then for each decision the fresh instance, the call
//! and the release of the store, with the linear memory the instance took; for pooling with
//! copy-on-write images and for on-demand allocation. Decisions run one at a time on a
//! current-thread runtime, as `cpctl policies test` runs them.
//!
//!     cargo run --release -p control-plane --example policy_profile -- \
//!         [--decisions N] [--memory-mib M] [--json] [--cache DIR]
//!         [--allocation pooling|on-demand]... [--instances fresh|per-organisation]
//!         builtin|FILE.wasm ...
//!
//! With `--instances per-organisation` every decision is of one organisation, in its warm
//! instances: "instantiate" is then the time to take one (or make one, when it was replaced).

use std::time::{Duration, Instant};

use control_plane::policy::{
    EngineSettings, InstanceAllocation, Instances, PolicyEngine, PolicyKind, bench_support,
    defaults,
};

struct Args {
    decisions: usize,
    memory_mib: usize,
    json: bool,
    /// Kept between runs when given: compilation is then measured only the first time.
    cache: Option<std::path::PathBuf>,
    allocations: Vec<InstanceAllocation>,
    instances: Instances,
    components: Vec<String>,
}

fn args() -> Args {
    let mut args = Args {
        decisions: 2000,
        memory_mib: 16,
        json: false,
        cache: None,
        allocations: vec![],
        instances: Instances::Fresh,
        components: vec![],
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--decisions" => args.decisions = it.next().and_then(|v| v.parse().ok()).expect("N"),
            "--memory-mib" => args.memory_mib = it.next().and_then(|v| v.parse().ok()).expect("M"),
            "--json" => args.json = true,
            "--cache" => args.cache = it.next().map(Into::into),
            "--allocation" => args.allocations.push(
                InstanceAllocation::parse(&it.next().unwrap_or_default()).expect("allocation"),
            ),
            "--instances" => {
                args.instances =
                    Instances::parse(&it.next().unwrap_or_default()).expect("instances")
            }
            "--bench" => {}
            other => args.components.push(other.to_owned()),
        }
    }
    if args.allocations.is_empty() {
        args.allocations = vec![InstanceAllocation::Pooling, InstanceAllocation::OnDemand];
    }
    if args.components.is_empty() {
        args.components.push("builtin".into());
    }
    args
}

fn engine(
    allocation: InstanceAllocation,
    memory_mib: usize,
    cache: Option<&std::path::Path>,
) -> std::sync::Arc<PolicyEngine> {
    PolicyEngine::new(EngineSettings {
        max_concurrent: 4,
        memory_bytes: memory_mib << 20,
        allocation,
        cache_dir: cache.map(|p| p.to_path_buf()),
        // Profiling measures, it does not enforce: a slow first decision is a figure here.
        deadline: Duration::from_secs(10),
        ..EngineSettings::default()
    })
    .expect("engine")
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn main() {
    let args = args();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let request = bench_support::authz_request();
    let mut rows = vec![];
    for name in &args.components {
        let bytes = if name == "builtin" {
            defaults::AUTHORIZER.to_vec()
        } else {
            std::fs::read(name).expect("component file")
        };
        let label = std::path::Path::new(name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| name.clone());
        let cache = args.cache.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("policy-profile-{}", std::process::id()))
        });
        for &allocation in &args.allocations {
            if args.cache.is_none() {
                let _ = std::fs::remove_dir_all(&cache);
            }
            let cold = engine(allocation, args.memory_mib, Some(&cache));
            let started = Instant::now();
            cold.compile(PolicyKind::Authorizer, &bytes)
                .expect("compiles");
            let compile = started.elapsed();
            let warm = engine(allocation, args.memory_mib, Some(&cache));
            let started = Instant::now();
            let policy = warm
                .compile(PolicyKind::Authorizer, &bytes)
                .expect("loads")
                .with_instances(args.instances);
            let load = started.elapsed();
            assert_eq!(warm.native_code_counts().from_disk, 1, "loaded from disk");
            if args.cache.is_none() {
                let _ = std::fs::remove_dir_all(&cache);
            }

            let organisation = uuid::Uuid::new_v4();
            let decide =
                || runtime.block_on(warm.authorize_profiled_for(&policy, &request, organisation));
            let first = decide().expect("decides").1;
            let mut instantiate = vec![];
            let mut call = vec![];
            let mut release = vec![];
            let mut total = vec![];
            let mut largest = 0;
            let mut all = 0;
            let mut reused = 0;
            for _ in 0..args.decisions {
                let started = Instant::now();
                let (_, p) = decide().expect("decides");
                reused += usize::from(p.reused);
                total.push(started.elapsed());
                instantiate.push(p.instantiate);
                call.push(p.call);
                release.push(p.release);
                largest = largest.max(p.largest_memory);
                all = all.max(p.total_memory);
            }
            for v in [&mut instantiate, &mut call, &mut release, &mut total] {
                v.sort();
            }
            let mode = match allocation {
                InstanceAllocation::Pooling => "pooling",
                InstanceAllocation::OnDemand => "on-demand",
            };
            let row = serde_json::json!({
                "component": label,
                "bytes": bytes.len(),
                "allocation": mode,
                "instances": args.instances.as_str(),
                "reused": reused,
                "compile_ms": compile.as_secs_f64() * 1e3,
                "load_from_disk_ms": load.as_secs_f64() * 1e3,
                "first_decision_us": (first.instantiate + first.call + first.release).as_secs_f64() * 1e6,
                "instantiate_us": [percentile(&instantiate, 0.5), percentile(&instantiate, 0.99)],
                "call_us": [percentile(&call, 0.5), percentile(&call, 0.99)],
                "release_us": [percentile(&release, 0.5), percentile(&release, 0.99)],
                "decision_us": [percentile(&total, 0.5), percentile(&total, 0.99)],
                "largest_memory_mib": largest as f64 / (1 << 20) as f64,
                "total_memory_mib": all as f64 / (1 << 20) as f64,
            });
            if !args.json {
                println!(
                    "{label:<14} {mode:<9} {:<16} reused {reused:>5} compile {:>8.1} ms  load {:>6.1} ms  | p50/p99 us: instantiate {:>7.1}/{:>7.1}  call {:>7.1}/{:>7.1}  release {:>6.1}/{:>6.1}  decision {:>7.1}/{:>7.1} | memory {:.1} MiB largest, {:.1} MiB total",
                    args.instances.as_str(),
                    compile.as_secs_f64() * 1e3,
                    load.as_secs_f64() * 1e3,
                    percentile(&instantiate, 0.5),
                    percentile(&instantiate, 0.99),
                    percentile(&call, 0.5),
                    percentile(&call, 0.99),
                    percentile(&release, 0.5),
                    percentile(&release, 0.99),
                    percentile(&total, 0.5),
                    percentile(&total, 0.99),
                    largest as f64 / (1 << 20) as f64,
                    all as f64 / (1 << 20) as f64,
                );
            }
            rows.push(row);
        }
    }
    if args.json {
        println!("{}", serde_json::Value::Array(rows));
    }
}
