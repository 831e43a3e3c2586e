//! The server the HTTP verbs talk to: a real `Application` in the test's process on the test's
//! own records, after `cpctl bootstrap`, and `cpctl` as its client with nothing in its
//! environment but a config folder of its own and `CPCTL_SERVER`/`CPCTL_TOKEN`. Tests that use
//! it run on a multi-threaded runtime: the server answers while the test thread waits for cpctl.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use control_plane::config::{RateOption, ServerConfig};
use control_plane::startup::Application;
use serde_json::Value;

use crate::records::Db;

/// A server on a test's records, and what its bootstrap made.
pub struct Served {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The bootstrap's token: an operator's, with every scope.
    pub token: String,
    /// The bootstrap's credential id, user, organisation and workspace.
    pub token_id: String,
    pub user: String,
    pub org: String,
    pub workspace: String,
    /// cpctl's config folder (`XDG_CONFIG_HOME`), removed on drop.
    pub home: PathBuf,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// Bootstraps organisation `acme` (workspace `prod`, operator `ops@acme.test`) and serves it.
pub async fn served(db: &Db) -> Served {
    serve(db, &crate::bootstrap(db)).await
}

/// [`served`], the server's settings changed by `configure` first.
pub async fn served_with(db: &Db, configure: impl FnOnce(&mut ServerConfig)) -> Served {
    serve_with(db, &crate::bootstrap(db), configure).await
}

/// Serves `db`, whose bootstrap printed `boot` (its JSON, or the same keys gathered from its
/// table).
pub async fn serve(db: &Db, boot: &Value) -> Served {
    serve_with(db, boot, |_| {}).await
}

async fn serve_with(db: &Db, boot: &Value, configure: impl FnOnce(&mut ServerConfig)) -> Served {
    let mut config = ServerConfig::for_database(&db.url);
    // Generous, so no budget trips however many commands a test runs.
    let rate = RateOption(Some(
        control_plane::storage::Rate::parse("100000/m").unwrap(),
    ));
    config.rate_limit = rate;
    config.issue_rate_limit = rate;
    config.user_rate_limit = rate;
    config.org_rate_limit = rate;
    configure(&mut config);
    let app = Application::build(&config)
        .await
        .expect("the server starts");
    let text = |v: &Value| v.as_str().expect("a bootstrap field").to_owned();
    Served {
        base: format!("http://127.0.0.1:{}", app.port()),
        token: text(&boot["credential"]["token"]),
        token_id: text(&boot["credential"]["id"]),
        user: text(&boot["userId"]),
        org: text(&boot["organisationId"]),
        workspace: text(&boot["workspaceId"]),
        home: config_home(),
        task: tokio::spawn(app.run()),
    }
}

impl Served {
    /// This server stopped and another started on `db` in its place (the embedded store
    /// serves one at a time), its settings changed by `configure`: a restart with, say, other
    /// signing keys. The same bootstrap's token; a config folder of its own.
    pub async fn restart(self, db: &Db, configure: impl FnOnce(&mut ServerConfig)) -> Served {
        let boot = serde_json::json!({
            "credential": { "token": self.token, "id": self.token_id },
            "userId": self.user,
            "organisationId": self.org,
            "workspaceId": self.workspace,
        });
        // Its store lock goes with its task; the next server waits for it.
        drop(self);
        serve_with(db, &boot, configure).await
    }

    /// `cpctl` over HTTP as the bootstrap's operator, `line` split at whitespace.
    pub fn run(&self, line: &str) -> Output {
        self.cpctl(&line.split_whitespace().collect::<Vec<_>>())
    }

    /// `cpctl` over HTTP as the bootstrap's operator.
    pub fn cpctl(&self, args: &[&str]) -> Output {
        self.cpctl_as(&self.token, args)
    }

    /// `cpctl` over HTTP with another token.
    pub fn cpctl_as(&self, token: &str, args: &[&str]) -> Output {
        self.cpctl_with(token, args, &[])
    }

    /// `cpctl` over HTTP with `token`, and `vars` beside the `CPCTL_*` pair.
    pub fn cpctl_with(&self, token: &str, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let pair = [("CPCTL_SERVER", self.base.as_str()), ("CPCTL_TOKEN", token)];
        let vars: Vec<(&str, &str)> = pair.iter().chain(vars).copied().collect();
        spawn(&self.home, args, &vars, "")
    }
}

/// A config folder of cpctl's own, under the temporary directory.
pub fn config_home() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cpctl-home-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// cpctl with an empty environment but `XDG_CONFIG_HOME` and `vars`, `stdin` as its input,
/// `line` split at whitespace.
pub fn client(home: &Path, line: &str, vars: &[(&str, &str)], stdin: &str) -> Output {
    spawn(
        home,
        &line.split_whitespace().collect::<Vec<_>>(),
        vars,
        stdin,
    )
}

fn spawn(home: &Path, args: &[&str], vars: &[(&str, &str)], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args(args)
        .env_clear()
        .env("XDG_CONFIG_HOME", home)
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}
