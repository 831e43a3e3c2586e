//! `cpctl policies new`: writes a ready policy project in Rust, Python or JavaScript. Every
//! file comes from the repository (the WIT, the default policies and their ports in
//! `policies/examples/`, their cases, the build scripts with the pinned tools), embedded here
//! with `include_str!`, so the templates are the very sources CI builds and tests.

use std::path::{Path, PathBuf};

use clap::ValueEnum;
use serde_json::json;

use crate::cli::OutputFormat;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    Authorizer,
    Moderator,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

/// Bad input (a name that cannot be a project, a folder already in use): `cpctl` exits 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

const WIT: &str = include_str!("../../policies/wit/policy.wit");
const AUTHZ_CASES: &str = include_str!("../../policies/authz/cases.json");
const MODERATION_CASES: &str = include_str!("../../policies/moderation/cases.json");
const RUST_AUTHZ: &str = include_str!("../../policies/authz/src/lib.rs");
const RUST_MODERATION: &str = include_str!("../../policies/moderation/src/lib.rs");
const RUST_WORKSPACE: &str = include_str!("../../policies/Cargo.toml");
const RUST_CARGO_CONFIG: &str = include_str!("../../policies/.cargo/config.toml");
const RUST_BUILD: &str = include_str!("../../policies/examples/rust/build.sh");
const PYTHON_AUTHZ: &str = include_str!("../../policies/examples/python/authorizer/app.py");
const PYTHON_MODERATION: &str = include_str!("../../policies/examples/python/moderator/app.py");
const PYTHON_BUILD: &str = include_str!("../../policies/examples/python/build.sh");
const JS_AUTHZ: &str = include_str!("../../policies/examples/js/authorizer/policy.js");
const JS_MODERATION: &str = include_str!("../../policies/examples/js/moderator/policy.js");
const JS_BUILD: &str = include_str!("../../policies/examples/js/build.sh");

/// One file of the project: its path inside the folder, its text, whether it is a script.
struct File {
    path: &'static str,
    text: String,
    executable: bool,
}

fn file(path: &'static str, text: impl Into<String>) -> File {
    File {
        path,
        text: text.into(),
        executable: false,
    }
}

/// A project name: lower-case letters, digits and `-`, starting with a letter (also a valid
/// crate name and policy name).
fn check_name(name: &str) -> Result<(), BadInput> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(BadInput(format!(
            "invalid policy name {name:?}: use lower-case letters, digits and '-', starting with a letter (at most 64)"
        )))
    }
}

/// The lines of `[section]` in a Cargo.toml, up to the next section.
fn section(toml: &str, header: &str) -> String {
    let mut lines = toml.lines().skip_while(|l| l.trim() != header);
    let mut out: Vec<&str> = lines.next().into_iter().collect();
    out.extend(lines.take_while(|l| !l.starts_with('[')));
    out.join("\n").trim_end().to_string()
}

/// The Cargo.toml of a Rust project: wit-bindgen and the release profile exactly as the
/// defaults are built with, and an empty workspace so that it builds inside any other tree.
fn cargo_toml(name: &str) -> String {
    let wit_bindgen = RUST_WORKSPACE
        .lines()
        .find(|l| l.starts_with("wit-bindgen = "))
        .unwrap_or(r#"wit-bindgen = { version = "0.57", default-features = false, features = ["macros", "realloc"] }"#);
    format!(
        "[package]\nname = \"{name}\"\nversion = \"1.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [lib]\ncrate-type = [\"cdylib\"]\n\n[dependencies]\n{wit_bindgen}\n\n{}\n\n\
         # A project of its own, even inside another workspace.\n[workspace]\n",
        section(RUST_WORKSPACE, "[profile.release]")
    )
}

fn files(name: &str, kind: Kind, lang: Lang) -> Vec<File> {
    let (cases, world) = match kind {
        Kind::Authorizer => (AUTHZ_CASES, "authorizer"),
        Kind::Moderator => (MODERATION_CASES, "moderator"),
    };
    let mut out = vec![file("wit/policy.wit", WIT), file("cases.json", cases)];
    let (source, build) = match (lang, kind) {
        (Lang::Rust, Kind::Authorizer) => (RUST_AUTHZ, RUST_BUILD),
        (Lang::Rust, Kind::Moderator) => (RUST_MODERATION, RUST_BUILD),
        (Lang::Python, Kind::Authorizer) => (PYTHON_AUTHZ, PYTHON_BUILD),
        (Lang::Python, Kind::Moderator) => (PYTHON_MODERATION, PYTHON_BUILD),
        (Lang::Js, Kind::Authorizer) => (JS_AUTHZ, JS_BUILD),
        (Lang::Js, Kind::Moderator) => (JS_MODERATION, JS_BUILD),
    };
    match lang {
        Lang::Rust => {
            // The defaults find the WIT one folder up; a project keeps it inside.
            out.push(file(
                "src/lib.rs",
                source.replace(r#"path: "../wit""#, r#"path: "wit""#),
            ));
            out.push(file("Cargo.toml", cargo_toml(name)));
            out.push(file(".cargo/config.toml", RUST_CARGO_CONFIG));
        }
        Lang::Python => out.push(file("app.py", source)),
        Lang::Js => out.push(file("policy.js", source)),
    }
    out.push(File {
        path: "build.sh",
        text: build.into(),
        executable: true,
    });
    out.push(file(".gitignore", "/policy.wasm\n/target/\n"));
    out.push(file("README.md", readme(name, world, lang)));
    out
}

fn readme(name: &str, world: &str, lang: Lang) -> String {
    let (language, source, needs) = match lang {
        Lang::Rust => (
            "Rust",
            "src/lib.rs",
            "Rust with the wasm32-wasip2 target (`rustup target add wasm32-wasip2`).",
        ),
        Lang::Python => (
            "Python",
            "app.py",
            "python3 (3.10 or newer, with venv). `build.sh` installs its pinned componentize-py \
             on first use into `${CP_POLICY_TOOLS:-~/.cache/cp-policy-tools}`.",
        ),
        Lang::Js => (
            "JavaScript",
            "policy.js",
            "node (18 or newer) and npm. `build.sh` installs its pinned \
             @bytecodealliance/componentize-js on first use into \
             `${CP_POLICY_TOOLS:-~/.cache/cp-policy-tools}`.",
        ),
    };
    let kind_flag = if world == "moderator" {
        " --kind moderator"
    } else {
        ""
    };
    format!(
        "# {name}\n\n\
         A control-plane {world} policy in {language}, starting as the default {world}: \
         edit `{source}`. `wit/policy.wit` is the contract (world `{world}`); every field is \
         documented there. `cases.json` holds the default policy's cases: change them with the \
         rules.\n\n\
         Needs {needs}\n\n\
         ```sh\n\
         ./build.sh                                                   # -> policy.wasm\n\
         cpctl policies test policy.wasm{kind_flag} --cases cases.json         # exit 1 on any mismatch\n\
         cpctl policies install policy.wasm --kind {world} --name {name}   # -> {name}@1\n\
         cpctl policies activate {name}@1\n\
         cpctl policies rollback {world}                               # if it misbehaves\n\
         ```\n\n\
         Every decision runs in a fresh instance within the server's budgets (50 ms and 16 MiB \
         by default; `CP_POLICY_DEADLINE_MS`, `CP_POLICY_MEMORY_MIB`), with no file, network, \
         environment or clock access. A policy that traps or runs out of a budget fails closed.\n"
    )
}

/// Writes the project and reports it; refuses a folder that exists and is not empty.
pub fn run(
    out: OutputFormat,
    name: &str,
    kind: Kind,
    lang: Lang,
    dir: Option<&Path>,
) -> anyhow::Result<()> {
    check_name(name)?;
    let dir: PathBuf = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    if let Ok(mut entries) = std::fs::read_dir(&dir) {
        if entries.next().is_some() {
            return Err(BadInput(format!(
                "{} exists and is not empty; name a new folder with --dir",
                dir.display()
            ))
            .into());
        }
    } else if dir.exists() {
        return Err(BadInput(format!("{} exists and is not a folder", dir.display())).into());
    }
    let files = files(name, kind, lang);
    for f in &files {
        let path = dir.join(f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, &f.text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        if f.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| anyhow::anyhow!("cannot make {} executable: {e}", path.display()))?;
        }
    }
    let kind_name = match kind {
        Kind::Authorizer => "authorizer",
        Kind::Moderator => "moderator",
    };
    let lang_name = match lang {
        Lang::Rust => "rust",
        Lang::Python => "python",
        Lang::Js => "js",
    };
    match out {
        OutputFormat::Json => println!(
            "{}",
            json!({
                "name": name,
                "kind": kind_name,
                "lang": lang_name,
                "dir": dir.display().to_string(),
                "files": files.iter().map(|f| f.path).collect::<Vec<_>>(),
            })
        ),
        OutputFormat::Table => {
            println!("wrote a {lang_name} {kind_name} in {}/:", dir.display());
            for f in &files {
                println!("  {}", f.path);
            }
            println!(
                "next: cd {} && ./build.sh   (then see README.md)",
                dir.display()
            );
        }
    }
    Ok(())
}
