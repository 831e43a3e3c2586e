//! Which external services a test run has: Postgres and Redis answer or they do not, and a test
//! that needs one either skips with one line saying so or, under `CP_TEST_REQUIRE_SERVICES=1`
//! (CI sets it), fails. Shared by the HTTP suite and the CLI tests (`#[path]`-included).

#![allow(dead_code)] // Each test binary uses a different part of it.

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Set to `1` to turn a service that does not answer into a failure instead of a skip.
pub const REQUIRE_VAR: &str = "CP_TEST_REQUIRE_SERVICES";

/// True when a missing service must fail the run (CI), not skip the tests that need it.
pub fn required() -> bool {
    std::env::var(REQUIRE_VAR).is_ok_and(|v| v == "1")
}

/// Base URL of the test Postgres server (no database part).
pub fn postgres_base() -> String {
    std::env::var("TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// URL of the test Redis.
pub fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// `host:port` of a `scheme://[user[:password]@]host[:port][/…]` URL, without the credentials.
pub fn address(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    let has_port = host.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']'));
    if has_port {
        return host.to_owned();
    }
    let port = match scheme {
        "postgres" | "postgresql" => 5432,
        "redis" => 6379,
        _ => 0,
    };
    format!("{host}:{port}")
}

/// Whether something accepts TCP connections at the URL's address, asked once per address per
/// test binary: the answer does not change during a run, and hundreds of tests ask.
pub fn answers(url: &str) -> bool {
    static SEEN: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
    let address = address(url);
    let seen = SEEN.get_or_init(Default::default);
    if let Some(known) = seen.lock().ok().and_then(|s| s.get(&address).copied()) {
        return known;
    }
    // A refused port answers at once; the timeout only bounds an address that drops packets.
    let up = address.to_socket_addrs().is_ok_and(|mut addrs| {
        addrs.any(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
    });
    if let Ok(mut seen) = seen.lock() {
        seen.insert(address, up);
    }
    up
}

/// Whether `program --version` runs: a binary some test starts itself.
pub fn on_path(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Writes one line to the terminal. Straight to the stderr handle, not `eprintln!`: the test
/// harness captures `eprintln!` of passing tests, and a skip must be seen.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// A service the run wants does not answer: fails (panics) under `CP_TEST_REQUIRE_SERVICES=1`,
/// and returns otherwise so the caller can skip or fall back.
pub fn missing(what: &str) {
    if required() {
        panic!("{what}, and {REQUIRE_VAR}=1 forbids skipping: start it, or unset {REQUIRE_VAR}");
    }
}

/// Skips the calling test with one line: `<test>: needs <what>; skipped`.
pub fn skip(test: &str, need: &str) {
    say(&format!("{test}: needs {need}; skipped"));
}

/// The name of the enclosing function (the test), for skip lines, without repeating it by hand.
macro_rules! test_name {
    () => {{
        fn here() {}
        fn name_of<T>(_: T) -> &'static str {
            std::any::type_name::<T>()
        }
        let path = name_of(here);
        let path = path.strip_suffix("::here").unwrap_or(path);
        let path = path.trim_end_matches("::{{closure}}");
        path.rsplit("::").next().unwrap_or(path)
    }};
}
#[allow(unused_imports)] // Not every test binary names its tests in a skip line.
pub(crate) use test_name;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_drops_credentials_and_defaults_the_port() {
        assert_eq!(
            address("postgres://postgres@127.0.0.1:5432/db"),
            "127.0.0.1:5432"
        );
        assert_eq!(address("postgres://u:p@db.example/x"), "db.example:5432");
        assert_eq!(address("redis://127.0.0.1"), "127.0.0.1:6379");
        assert_eq!(address("redis://127.0.0.1:1/"), "127.0.0.1:1");
    }

    #[test]
    fn test_name_names_the_enclosing_test() {
        assert_eq!(test_name!(), "test_name_names_the_enclosing_test");
    }
}
