//! The disk cache of native code: used by a second engine, and a damaged, foreign or
//! unprotected file is never loaded.

use std::path::{Path, PathBuf};

use super::engine::{NativeCodeCounts, PolicyEngine, PolicyKind};
use super::settings::EngineSettings;
use super::wit::authz_types as a;
use super::{bench_support, defaults, fixtures};

/// A fresh private directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "cp-policy-cache-{name}-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir(&dir).expect("temp dir");
        set_mode(&dir, 0o700);
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn engine(cache: &Path) -> std::sync::Arc<PolicyEngine> {
    PolicyEngine::new(EngineSettings {
        max_concurrent: 2,
        cache_dir: Some(cache.to_path_buf()),
        ..EngineSettings::default()
    })
    .expect("engine")
}

/// The cache files in `dir`, by name.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

/// Compiles the built-in authorizer in a new engine on `cache`, checks it still allows a
/// typical request, and tells how its native code was obtained.
fn load_builtin(cache: &Path) -> NativeCodeCounts {
    let engine = engine(cache);
    let policy = engine
        .compile(PolicyKind::Authorizer, defaults::AUTHORIZER)
        .expect("compiles");
    let decision = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(engine.authorize_now(&policy, &bench_support::authz_request()));
    assert_eq!(decision, Ok(a::AuthzDecision::Allow));
    engine.native_code_counts()
}

const COMPILED: NativeCodeCounts = NativeCodeCounts {
    compiled: 1,
    from_disk: 0,
};
const FROM_DISK: NativeCodeCounts = NativeCodeCounts {
    compiled: 0,
    from_disk: 1,
};

#[test]
fn a_second_engine_loads_native_code_from_disk_instead_of_compiling() {
    let cache = TempDir::new("reuse");
    assert_eq!(load_builtin(&cache.0), COMPILED);
    let written = files(&cache.0);
    assert_eq!(written.len(), 1, "one file per component: {written:?}");
    let name = written[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with(&super::digest(defaults::AUTHORIZER)) && name.ends_with(".cwasm"),
        "named by digest and engine: {name}"
    );
    assert_eq!(load_builtin(&cache.0), FROM_DISK);
}

#[test]
fn a_corrupted_cache_file_is_ignored_and_replaced() {
    let cache = TempDir::new("corrupt");
    load_builtin(&cache.0);
    let file = files(&cache.0).remove(0);
    let mut bytes = std::fs::read(&file).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&file, &bytes).expect("corrupt");
    assert_eq!(
        load_builtin(&cache.0),
        COMPILED,
        "the damaged file is not loaded"
    );
    assert_ne!(
        std::fs::read(&file).expect("read"),
        bytes,
        "and it was replaced"
    );
    assert_eq!(load_builtin(&cache.0), FROM_DISK, "by a sound one");

    std::fs::write(&file, b"short").expect("truncate");
    assert_eq!(
        load_builtin(&cache.0),
        COMPILED,
        "a truncated file is not loaded"
    );
    assert_eq!(load_builtin(&cache.0), FROM_DISK);
}

#[test]
fn a_foreign_cache_file_is_ignored_and_replaced() {
    // Sound native code of another component (deny-all), renamed to the authorizer's file:
    // loading it would deny every request.
    let cache = TempDir::new("foreign");
    load_builtin(&cache.0);
    let own = files(&cache.0).remove(0);
    let other = TempDir::new("foreign-src");
    engine(&other.0)
        .compile(PolicyKind::Authorizer, fixtures::DENY_ALL)
        .expect("deny-all compiles");
    let foreign = files(&other.0).remove(0);
    std::fs::copy(&foreign, &own).expect("copy");
    assert_eq!(
        load_builtin(&cache.0),
        COMPILED,
        "the foreign file is not loaded"
    );
    assert_eq!(load_builtin(&cache.0), FROM_DISK, "it was replaced");
}

#[test]
fn a_cache_others_can_write_is_never_read() {
    let cache = TempDir::new("shared");
    load_builtin(&cache.0);
    set_mode(&cache.0, 0o777);
    // Refused at open: the engine keeps native code in memory only (where another test may
    // already have put this component), so all that can be said is that the disk was not read.
    assert_eq!(
        load_builtin(&cache.0).from_disk,
        0,
        "a world-writable directory"
    );
    set_mode(&cache.0, 0o700);
    let file = files(&cache.0).remove(0);
    set_mode(&file, 0o666);
    assert_eq!(load_builtin(&cache.0), COMPILED, "a world-writable file");
}
