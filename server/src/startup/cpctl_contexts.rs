//! cpctl's contexts file: a server URL and a token per name, kept by `cpctl login` in
//! `$XDG_CONFIG_HOME/cpctl/contexts.json` (`~/.config/cpctl/` without it). It lives in the
//! library because two programs write it: cpctl, and the server under `--dev`, which leaves a
//! `dev` context for the token it prints. Only its owner may read it: it is written `0600` in
//! a `0700` folder, and one that group or others can read is refused, as ssh refuses a
//! readable key.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Contexts {
    pub current: Option<String>,
    #[serde(default)]
    pub contexts: BTreeMap<String, Context>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Context {
    pub server: String,
    pub token: String,
    /// Who the token was when it was kept, for `context list` and as the default organisation
    /// of the verbs that take `--org` (the server is asked again by `whoami`).
    pub user_id: Option<String>,
    pub organisation_id: Option<String>,
    pub role: Option<String>,
}

impl Contexts {
    /// The file's path: `$XDG_CONFIG_HOME/cpctl/contexts.json`, or under `$HOME/.config`.
    pub fn path() -> anyhow::Result<PathBuf> {
        let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(
                std::env::var_os("HOME")
                    .ok_or_else(|| anyhow!("neither XDG_CONFIG_HOME nor HOME is set"))?,
            )
            .join(".config"),
        };
        Ok(base.join("cpctl").join("contexts.json"))
    }

    /// The contexts kept at `path`; none when there is no file. A file others may read is an
    /// error naming the `chmod` that fixes it.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let mode = file.metadata()?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            bail!(
                "{} holds tokens and other users may read it (mode {mode:03o}): run `chmod 600 {}`",
                path.display(),
                path.display()
            );
        }
        serde_json::from_reader(file)
            .with_context(|| format!("{} is not a cpctl contexts file", path.display()))
    }

    /// Writes the file whole, `0600` from its first byte, then renames it into place, so a
    /// reader never sees half a file and the token is never readable by others, even briefly.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let dir = path
            .parent()
            .ok_or_else(|| anyhow!("no folder for {}", path.display()))?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let temporary = dir.join(format!(".contexts.json.{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .with_context(|| format!("cannot write {}", temporary.display()))?;
        let written = serde_json::to_writer_pretty(&mut file, self)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(file.write_all(b"\n")?))
            .and_then(|()| Ok(file.sync_all()?))
            .and_then(|()| Ok(std::fs::rename(&temporary, path)?));
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written.with_context(|| format!("cannot write {}", path.display()))
    }

    /// Keeps `context` as `name` and makes it the current one, in the file at `path`.
    pub fn keep(path: &Path, name: &str, context: Context) -> anyhow::Result<()> {
        let mut contexts = Self::load(path)?;
        contexts.contexts.insert(name.to_owned(), context);
        contexts.current = Some(name.to_owned());
        contexts.save(path)
    }
}
