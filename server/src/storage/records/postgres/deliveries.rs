//! Runners' delivery URLs and delivery attempts: every statement is the same on both backends (`storage/records/sql/deliveries.rs`).

// Compiled once per SQL backend (see the layout in `storage/mod.rs`).
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/deliveries.rs"]
mod shared;
