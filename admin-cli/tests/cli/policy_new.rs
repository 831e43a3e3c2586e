//! `cpctl policies new`: the project each language gets, made of the repository's own files,
//! a folder in use refused, and the Rust project built and tested where the wasm32-wasip2
//! target is installed.

use super::*;

fn repo(path: &str) -> String {
    let path = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn new_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("cp-new-{}", uuid::Uuid::new_v4().simple()))
}

/// `cpctl policies new` with no records store: it only writes files.
fn new_policy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args(["policies", "new"])
        .args(args)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap()
}

#[test]
fn policies_new_writes_each_language_from_the_repository_sources() {
    for (lang, kind, source, repo_source, build) in [
        (
            "python",
            "authorizer",
            "app.py",
            "policies/examples/python/authorizer/app.py",
            "policies/examples/python/build.sh",
        ),
        (
            "python",
            "moderator",
            "app.py",
            "policies/examples/python/moderator/app.py",
            "policies/examples/python/build.sh",
        ),
        (
            "js",
            "authorizer",
            "policy.js",
            "policies/examples/js/authorizer/policy.js",
            "policies/examples/js/build.sh",
        ),
        (
            "js",
            "moderator",
            "policy.js",
            "policies/examples/js/moderator/policy.js",
            "policies/examples/js/build.sh",
        ),
    ] {
        let dir = new_dir();
        let name = format!("my-{lang}-{kind}");
        let out = new_policy(&[
            &name,
            "--kind",
            kind,
            "--lang",
            lang,
            "--dir",
            dir.to_str().unwrap(),
            "-o",
            "json",
        ]);
        let written = json_of(&out);
        assert_eq!(written["lang"], lang);
        assert_eq!(written["kind"], kind);
        let mut files: Vec<&str> = written["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        files.sort_unstable();
        let mut expected = vec![
            ".gitignore",
            "README.md",
            "build.sh",
            "cases.json",
            source,
            "wit/policy.wit",
        ];
        expected.sort_unstable();
        assert_eq!(files, expected, "{lang} {kind}");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(
            read(source),
            repo(repo_source),
            "{lang} {kind}: the example itself"
        );
        assert_eq!(read("build.sh"), repo(build));
        assert_eq!(read("wit/policy.wit"), repo("policies/wit/policy.wit"));
        let cases = if kind == "authorizer" {
            "authz"
        } else {
            "moderation"
        };
        assert_eq!(
            read("cases.json"),
            repo(&format!("policies/{cases}/cases.json"))
        );
        let readme = read("README.md");
        assert!(
            readme.contains(&format!(
                "cpctl policies install policy.wasm --kind {kind} --name {name}"
            )),
            "{readme}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("build.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "build.sh is executable");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn policies_new_refuses_a_folder_in_use_and_a_bad_name() {
    let dir = new_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "mine").unwrap();
    let args = |name| {
        new_policy(&[
            name,
            "--kind",
            "authorizer",
            "--lang",
            "python",
            "--dir",
            dir.to_str().unwrap(),
        ])
    };
    let out = args("mine");
    let err = failure(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "nothing written"
    );
    let out = args("Bad_Name");
    let err = failure(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("invalid policy name"), "{err}");
    let out = new_policy(&["ok", "--kind", "authorizer", "--lang", "cobol"]);
    failure(&out);
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Rust project builds into a component that passes its cases, where the wasm32-wasip2
/// target is installed; a user's machine may not have it, so without it this checks the files.
#[test]
fn policies_new_rust_project_builds_and_passes_its_cases_where_the_target_is_installed() {
    for (kind, cases_flag) in [("authorizer", "authorizer"), ("moderator", "moderator")] {
        let dir = new_dir();
        let out = new_policy(&[
            "my-rust-policy",
            "--kind",
            kind,
            "--lang",
            "rust",
            "--dir",
            dir.to_str().unwrap(),
        ]);
        assert_ok(&out);
        for f in [
            "Cargo.toml",
            "src/lib.rs",
            ".cargo/config.toml",
            "build.sh",
            "cases.json",
        ] {
            assert!(dir.join(f).is_file(), "{kind}: {f}");
        }
        let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        assert!(lib.contains(r#"path: "wit""#), "{lib}");
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("name = \"my-rust-policy\"") && cargo.contains("wit-bindgen"));

        let installed = Command::new("rustup")
            .args(["target", "list", "--installed"])
            .output()
            .is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l == "wasm32-wasip2")
            });
        if !installed {
            services::say(&format!(
                "policies_new_rust_project_builds: the wasm32-wasip2 target is not installed; {kind} not built"
            ));
            let _ = std::fs::remove_dir_all(&dir);
            continue;
        }
        // One target folder for both kinds: wit-bindgen is compiled once.
        let target = std::env::temp_dir().join("cp-new-rust-target");
        let build = Command::new(dir.join("build.sh"))
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("RUSTFLAGS")
            .output()
            .unwrap();
        assert!(build.status.success(), "{}", stderr(&build));
        let wasm = dir.join("policy.wasm");
        let out = Command::new(env!("CARGO_BIN_EXE_cpctl"))
            .args([
                "policies",
                "test",
                wasm.to_str().unwrap(),
                "--kind",
                cases_flag,
                "--cases",
            ])
            .arg(dir.join("cases.json"))
            .output()
            .unwrap();
        assert_ok(&out);
        assert!(stdout(&out).contains(" 0 failed"), "{}", stdout(&out));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
