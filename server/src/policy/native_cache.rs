//! Native code of compiled policies kept on disk, so a replica start or `cpctl policies test`
//! deserializes an 18 MB Python component in milliseconds instead of compiling it for seconds.
//! Loading native code runs whatever it contains, so a file is used only from a directory that
//! this user owns and nobody else can write, only when its header names the expected component
//! digest and engine compatibility hash, and only when the SHA-256 of its payload matches;
//! anything else is ignored and replaced by a fresh compilation, written atomically.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::Digest;

const MAGIC: &[u8] = b"control-plane policy native code v1\n";
/// Hex digest (64), engine hash (16 hex) and payload SHA-256 (64), each followed by a newline.
const HEADER_LEN: usize = MAGIC.len() + 65 + 17 + 65;

/// Where the native code of one component for one engine configuration lives.
pub(super) struct NativeCache {
    dir: PathBuf,
}

impl NativeCache {
    /// Opens `dir`, creating it private (0700) when absent. A directory another user owns or
    /// can write is refused: whoever can write there could make the server run their code.
    pub(super) fn open(dir: &Path) -> Result<Self, String> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !meta.is_dir() {
            return Err(format!("{} is not a directory", dir.display()));
        }
        check_private(&meta, dir)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc_geteuid() };
        if meta.uid() != me {
            return Err(format!(
                "{} belongs to another user (uid {}): the policy cache must be this user's own",
                dir.display(),
                meta.uid()
            ));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, digest: &str, engine: u64) -> PathBuf {
        self.dir.join(format!("{digest}-{engine:016x}.cwasm"))
    }

    /// The payload stored for (digest, engine) when the file is sound, else `None`.
    pub(super) fn load(&self, digest: &str, engine: u64) -> Option<Vec<u8>> {
        use std::os::unix::fs::MetadataExt;
        let path = self.path(digest, engine);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        // SAFETY: see `open`.
        if !meta.is_file() || meta.uid() != unsafe { libc_geteuid() } {
            return None;
        }
        check_private(&meta, &path).ok()?;
        let mut bytes = std::fs::read(&path).ok()?;
        let payload = bytes.get(HEADER_LEN..)?;
        if bytes[..HEADER_LEN] != header(digest, engine, payload)[..] {
            return None;
        }
        bytes.drain(..HEADER_LEN);
        Some(bytes)
    }

    /// Writes the payload for (digest, engine) atomically: a reader sees the old file or the
    /// whole new one, never half of it.
    pub(super) fn store(&self, digest: &str, engine: u64, payload: &[u8]) -> Result<(), String> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path(digest, engine);
        let temp = self.dir.join(format!(
            ".{digest}-{engine:016x}.{}.{}.tmp",
            std::process::id(),
            rand::random::<u64>()
        ));
        let written = (|| {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)?;
            file.write_all(&header(digest, engine, payload))?;
            file.write_all(payload)?;
            file.sync_all()?;
            std::fs::rename(&temp, &path)
        })();
        written.map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            format!("cannot write {}: {e}", path.display())
        })
    }
}

fn header(digest: &str, engine: u64, payload: &[u8]) -> Vec<u8> {
    let sum: String = sha2::Sha256::digest(payload)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut header = MAGIC.to_vec();
    header.extend_from_slice(format!("{digest:<64.64}\n{engine:016x}\n{sum}\n").as_bytes());
    debug_assert_eq!(header.len(), HEADER_LEN);
    header
}

fn check_private(meta: &std::fs::Metadata, path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by other users: the policy cache must not be",
            path.display()
        ));
    }
    Ok(())
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
