//! The embedded store's files hold secrets (token hashes, sealed idempotency outcomes, signing
//! keys), so they are the owner's alone: the folder is created `0700`, the database file `0600`
//! before SQLite first opens it (SQLite gives its `-wal` and `-shm` files the database's mode),
//! and a store that others can read is refused with the command that fixes it. On platforms
//! without Unix modes these are no-ops.

use std::path::Path;

use super::StoreError;

/// The mode bits that let anyone but the owner in.
#[cfg(unix)]
const OTHERS: u32 = 0o077;

/// Creates `dir` and any missing parent, each created one owner-only.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Opens (creating owner-only when missing) a file the embedded store keeps beside its
/// database, such as the server lock.
pub fn open_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Makes the database's folder and file owner-only when it creates them, and refuses a
/// database, WAL or shared-memory file that others may read or write.
pub fn prepare(path: &Path) -> Result<(), StoreError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dir(parent).map_err(|e| {
            StoreError::Internal(format!("cannot create {}: {e}", parent.display()))
        })?;
    }
    refuse_loose(path)?;
    open_private_file(path)
        .map(drop)
        .map_err(|e| StoreError::Internal(format!("cannot create {}: {e}", path.display())))
}

#[cfg(unix)]
fn refuse_loose(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & OTHERS != 0 {
            return Err(StoreError::Internal(format!(
                "{} has mode {mode:03o}: the embedded store holds secrets and must be readable by \
                 its owner only; fix it with: chmod go-rwx {}*",
                Path::new(&file).display(),
                path.display()
            )));
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn refuse_loose(_path: &Path) -> Result<(), StoreError> {
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_store_is_the_owners_alone_and_a_loosened_one_is_refused() {
        let root = std::env::temp_dir().join(format!("cp-files-{}", uuid::Uuid::new_v4().simple()));
        let db = root.join("data").join("control-plane.db");
        prepare(&db).unwrap();
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(db.parent().unwrap()), 0o700);
        assert_eq!(mode(&db), 0o600);
        // Idempotent on a store already in shape.
        prepare(&db).unwrap();
        let wal = root.join("data").join("control-plane.db-wal");
        std::fs::write(&wal, b"").unwrap();
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o640)).unwrap();
        let refused = prepare(&db).unwrap_err().to_string();
        assert!(
            refused.contains("control-plane.db-wal has mode 640"),
            "{refused}"
        );
        assert!(refused.contains("chmod go-rwx"), "{refused}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
