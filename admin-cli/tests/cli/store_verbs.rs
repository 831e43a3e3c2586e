//! Which verbs open the records store: every verb `cpctl --help` lists (walked down through
//! each group's own `--help`) runs once with `DATABASE_URL` naming a tripwire, a loopback port
//! that counts the connections made to it, and with its context naming a server that records
//! the requests it gets. Only `migrate`, `bootstrap`, `store copy` and `recover` may touch the
//! tripwire, and each of them must (else the tripwire proves nothing); every other verb either
//! asked the server or is one of the local verbs, which need neither.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::*;

/// The verbs that open the records store (docs/operations.md, "What opens the records store").
const STORE_VERBS: [&str; 4] = ["migrate", "bootstrap", "store copy", "recover"];

/// Verbs that need neither the store nor a server: files, keys, contexts, the shell.
const LOCAL_VERBS: [&str; 11] = [
    "completion",
    "context list",
    "context use",
    "context remove",
    "login",
    "policies bench",
    "policies new",
    "policies test",
    "runners serve",
    "runners sign",
    "help",
];

/// A loopback listener that counts connections and answers each with `reply` (or closes it).
struct Counter {
    port: u16,
    seen: Arc<AtomicUsize>,
}

fn counter(reply: Option<&'static str>) -> Counter {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            if let Some(body) = reply {
                let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = [0u8; 8192];
                let _ = stream.read(&mut buf);
                let _ = write!(
                    stream,
                    "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        }
    });
    Counter { port, seen }
}

const NOT_FOUND: &str = r#"{"error":{"code":"not_found","message":"recorded","correlationId":"00000000-0000-4000-8000-000000000000"}}"#;

fn help_of(path: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args(path)
        .arg("--help")
        .output()
        .unwrap();
    assert_ok(&out);
    stdout(&out)
}

/// The subcommands a `--help` lists under "Commands:", without `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "help")
        .collect()
}

/// Every leaf verb, as its path of names.
fn leaves(path: Vec<String>, into: &mut Vec<Vec<String>>) {
    let below = subcommands(&help_of(&path));
    if below.is_empty() {
        into.push(path);
        return;
    }
    for name in below {
        let mut next = path.clone();
        next.push(name);
        leaves(next, into);
    }
}

/// A value for a placeholder of the usage line: ids get a fresh UUID, files a file, the store a
/// verb reads `store` (the tripwire).
fn value_for(placeholder: &str, file: &str, store: &str) -> String {
    let p = placeholder.to_ascii_uppercase();
    // Whole names first: a word inside another (`TO` in `TOKEN`) must not decide.
    match p.as_str() {
        // `store copy`: the store it reads is the tripwire; the one it fills answers nowhere.
        "FROM" => return store.to_owned(),
        "TO" => return "postgres://postgres@127.0.0.1:9/copy-target".into(),
        "ROLE" => return "member".into(),
        // A well-formed Ed25519 key (base64 of 32 bytes): the runner verbs get past it.
        "PRIVATE_KEY" => return "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=".into(),
        _ => {}
    }
    let has = |word: &str| p.contains(word);
    if has("FILE") || has("CASES") || has("EXPORT") || has("JWKS") {
        file.to_owned()
    } else if has("SHELL") {
        "bash".into()
    } else if has("KIND") {
        "authorizer".into()
    } else if has("LANG") {
        "rust".into()
    } else if has("RULE") {
        "refuse".into()
    } else if has("POLICY") {
        "strict@1".into()
    } else if has("SINCE") || has("SPAN") || has("RETENTION") {
        "24h".into()
    } else if has("URL") || has("SERVER") {
        "http://127.0.0.1:9/".into()
    } else if has("OPERATOR") || has("EMAIL") || has("ADMIN") {
        "ops@acme.test".into()
    } else if [
        "ID",
        "USER",
        "TOKEN",
        "RUNNER",
        "POOL",
        "WORKSPACE",
        "DELIVERY",
        "WORKFLOW",
        "REVISION",
        "PLUGIN",
        "REVIEW",
        "ORG",
        "KEY",
    ]
    .iter()
    .any(|w| has(w))
    {
        uuid::Uuid::new_v4().to_string()
    } else {
        "x".into()
    }
}

/// The arguments the usage line requires: `--flag <VALUE>` pairs and `<POSITIONAL>`s.
fn required_args(help: &str, file: &str, store: &str) -> Vec<String> {
    let usage = help
        .lines()
        .find_map(|l| l.strip_prefix("Usage: "))
        .expect("a usage line");
    args_of(usage.split_whitespace().skip(1), file, store)
}

/// What clap says is still missing (`tokens revoke` needs `--workspace` unless `--cascade`, which
/// the usage line does not show), as [`required_args`] gives it; nothing when clap refused for
/// another reason.
fn missing_args(err: &str, file: &str, store: &str) -> Vec<String> {
    const MISSING: &str = "required arguments were not provided:";
    let Some((_, rest)) = err.split_once(MISSING) else {
        return Vec::new();
    };
    let named = rest.split("tip:").next().unwrap_or_default();
    args_of(named.split_whitespace(), file, store)
}

/// `--flag` as it is, a value for each `<PLACEHOLDER>`; optional `[…]` parts left out.
fn args_of<'a>(tokens: impl Iterator<Item = &'a str>, file: &str, store: &str) -> Vec<String> {
    let mut args = Vec::new();
    for token in tokens {
        if token.starts_with('[') || token.starts_with("cpctl") {
            continue;
        }
        if token.starts_with("--") {
            args.push(token.to_owned());
        } else if let Some(name) = token.strip_prefix('<') {
            let name = name.trim_end_matches("...").trim_end_matches('>');
            args.push(value_for(name, file, store));
        }
    }
    args
}

#[test]
fn only_migrate_bootstrap_store_copy_and_recover_open_the_records_store() {
    let config = tempfile_dir("store-verbs-config");
    let data = tempfile_dir("store-verbs-data");
    let scratch = tempfile_dir("store-verbs-cwd");
    let file = write_temp("verb-input", b"{}");
    let file = file.to_str().unwrap();
    let mut verbs = Vec::new();
    leaves(vec![], &mut verbs);
    let names: Vec<String> = verbs.iter().map(|v| v.join(" ")).collect();
    for expected in STORE_VERBS
        .iter()
        .chain(["users list", "policies install"].iter())
    {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }

    for verb in &verbs {
        let name = verb.join(" ");
        let tripwire = counter(None);
        let server = counter(Some(NOT_FOUND));
        let store = format!("postgres://postgres@127.0.0.1:{}/tripwire", tripwire.port);
        let mut args = verb.clone();
        args.extend(required_args(&help_of(verb), file, &store));
        if name == "runners serve" {
            args.extend(["--listen".into(), "127.0.0.1:0".into()]);
        }
        let cpctl = |args: &[String]| {
            let mut child = Command::new(env!("CARGO_BIN_EXE_cpctl"))
                .args(args)
                .env("DATABASE_URL", &store)
                .env("CP_DATA_DIR", &data)
                // What a verb writes in its folder (`policies new`) goes to a scratch one.
                .current_dir(&scratch)
                .env("XDG_CONFIG_HOME", &config)
                .env("CPCTL_SERVER", format!("http://127.0.0.1:{}", server.port))
                .env("CPCTL_TOKEN", "cp_tripwire_not_a_token")
                .env_remove("CP_DEV")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // A verb that runs until stopped (`runners serve`) is stopped after a few seconds:
            // what it would open, it opened by then.
            let limit = if name == "runners serve" { 3 } else { 20 };
            let deadline = Instant::now() + Duration::from_secs(limit);
            while child.try_wait().unwrap().is_none() {
                if Instant::now() > deadline {
                    child.kill().unwrap();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            child.wait_with_output().unwrap()
        };
        let mut out = cpctl(&args);
        // A requirement the usage line does not show: clap names it, and refuses before
        // anything is opened or asked; the verb runs again with it.
        for _ in 0..3 {
            let missing = missing_args(&stderr(&out), file, &store);
            if out.status.code() != Some(2) || missing.is_empty() {
                break;
            }
            args.extend(missing);
            out = cpctl(&args);
        }
        let status = out.status.code();
        assert_ne!(
            status,
            Some(2),
            "{name}: its arguments were refused: {}",
            stderr(&out)
        );
        let opened = tripwire.seen.load(Ordering::SeqCst);
        let asked = server.seen.load(Ordering::SeqCst);
        if STORE_VERBS.contains(&name.as_str()) {
            assert!(opened > 0, "{name} should open the store: {}", stderr(&out));
        } else {
            assert_eq!(
                opened,
                0,
                "{name} opened the records store: {}",
                stderr(&out)
            );
            let local = LOCAL_VERBS
                .iter()
                .any(|l| name == *l || name.starts_with(&format!("{l} ")));
            assert!(
                local || asked > 0,
                "{name} neither asked the server nor is a local verb: {}",
                stderr(&out)
            );
        }
        assert!(
            std::fs::read_dir(&data).unwrap().next().is_none(),
            "{name} made a store in the data directory"
        );
    }
    for dir in [&config, &data, &scratch] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{}-{name}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
