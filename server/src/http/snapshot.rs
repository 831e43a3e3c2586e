//! Committed snapshots (`server/snapshots/`), compared byte for byte so that every change to
//! what they hold shows in review. After a deliberate change, rewrite them with
//! `UPDATE_SNAPSHOTS=1 cargo test -p control-plane --lib snapshot` and commit the files.

/// Compares `actual` (plus a final newline) with `server/snapshots/<name>`, or writes it there
/// when `UPDATE_SNAPSHOTS` is set.
pub fn assert_snapshot(name: &str, actual: &str) {
    let path = format!("{}/snapshots/{name}", env!("CARGO_MANIFEST_DIR"));
    let actual = format!("{actual}\n");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &actual).expect("write the snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if actual == expected {
        return;
    }
    let mut want = expected.lines();
    let mut got = actual.lines();
    let mut line = 1;
    let (want, got) = loop {
        match (want.next(), got.next()) {
            (a, b) if a == b && a.is_some() => line += 1,
            (a, b) => break (a.unwrap_or("<end>"), b.unwrap_or("<end>")),
        }
    };
    panic!(
        "{path} differs first at line {line}:\n  snapshot: {want}\n  now:      {got}\n\
         If the change is deliberate, run \
         `UPDATE_SNAPSHOTS=1 cargo test -p control-plane --lib snapshot` and commit the file."
    );
}
