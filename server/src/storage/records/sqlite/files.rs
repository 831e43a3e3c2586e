//! The embedded store's files hold secrets (token hashes, sealed idempotency outcomes, signing
//! keys), so they are the owner's alone: the folder is created `0700`, the database file `0600`
//! before SQLite first opens it (SQLite gives its `-wal` and `-shm` files the database's mode),
//! and a store that others can read is refused with the command that fixes it. On platforms
//! without Unix modes these are no-ops.

use std::path::Path;

use crate::storage::StoreError;

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

/// The text of an owner-only key file, created with `fresh()` when missing: (text, created).
/// Creation is atomic (a complete file is linked into place), so processes starting together
/// agree on one key. A file others may read is refused with the command that fixes it.
pub fn read_or_create_key_file(
    path: &Path,
    fresh: impl FnOnce() -> String,
) -> Result<(String, bool), String> {
    use std::io::Write;
    let shown = path.display();
    let created = match std::fs::metadata(path) {
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut staged = path.as_os_str().to_owned();
            staged.push(format!(".{}.{}", std::process::id(), rand::random::<u32>()));
            let staged = std::path::PathBuf::from(staged);
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let written = options
                .open(&staged)
                .and_then(|mut f| f.write_all(fresh().as_bytes()).and_then(|()| f.sync_all()));
            let linked = written.and_then(|()| std::fs::hard_link(&staged, path));
            let _ = std::fs::remove_file(&staged);
            match linked {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
                Err(e) => return Err(format!("cannot create {shown}: {e}")),
            }
        }
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|e| format!("cannot read {shown}: {e}"))?
            .permissions()
            .mode()
            & 0o777;
        if mode & OTHERS != 0 {
            return Err(format!(
                "{shown} has mode {mode:03o}: a key file must be readable by its owner only; \
                 fix it with: chmod go-rwx {shown}"
            ));
        }
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    Ok((text, created))
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

    #[test]
    fn a_key_file_is_created_owner_only_once_and_a_loose_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("cp-kek-{}", uuid::Uuid::new_v4().simple()));
        create_private_dir(&dir).unwrap();
        let path = dir.join("control-plane.kek");
        let (text, created) = read_or_create_key_file(&path, || "first".into()).unwrap();
        assert_eq!((text.as_str(), created), ("first", true));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (text, created) = read_or_create_key_file(&path, || "second".into()).unwrap();
        assert_eq!(
            (text.as_str(), created),
            ("first", false),
            "kept, not replaced"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = read_or_create_key_file(&path, || "third".into()).unwrap_err();
        assert!(err.contains("chmod go-rwx"), "{err}");
        assert!(!err.contains("first"), "the error holds no key: {err}");
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(leftovers, 1, "no staged file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
