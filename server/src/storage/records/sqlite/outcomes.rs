//! Committed outcomes of keyed requests: every statement is the same on both backends (`storage/records/sql/outcomes.rs`).

// Compiled once per SQL backend (see the layout in `storage/mod.rs`).
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/outcomes.rs"]
mod shared;

pub(super) use self::shared::insert_outcome;
