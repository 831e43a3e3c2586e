//! Runner pools, runners and keys, commands and their deliveries: every statement is the same on
//! both backends (`storage/records/sql/runners.rs` and `sql/commands.rs`).

use crate::storage::records::rows::DeliveryRow;
use crate::storage::{DeliveryTransition, StoreError, WriteContext};

// Compiled once per SQL backend (see the layout in `storage/mod.rs`).
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/commands.rs"]
mod commands;
#[allow(clippy::duplicate_mod, reason = "one text, compiled for each backend")]
#[path = "../sql/runners.rs"]
mod shared;

/// SQLite has one writer and no round trips to save: every report goes alone.
async fn batch_transition_delivery(
    _store: &super::SqliteStore,
    _write: &WriteContext,
    _t: &DeliveryTransition,
) -> Option<Result<Option<DeliveryRow>, StoreError>> {
    None
}
