//! Organisations, workspaces, environments and users: every statement is the same on both backends (`storage/records/sql/directory.rs`).

// Compiled once per SQL backend (see the layout in `storage/mod.rs`).
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/directory.rs"]
mod shared;
