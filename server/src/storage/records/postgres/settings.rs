//! Server-wide settings: every statement is the same on both backends (`storage/records/sql/settings.rs`).

// Compiled once per SQL backend (see the layout in `storage/mod.rs`).
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/settings.rs"]
mod shared;
