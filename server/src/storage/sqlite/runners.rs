//! Runner pools, runners and keys, commands and their deliveries: every statement is the same on both backends (`storage/sql/runners.rs`).

// Compiled once per SQL backend (see the layout in `storage/mod.rs`).
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/runners.rs"]
mod shared;
