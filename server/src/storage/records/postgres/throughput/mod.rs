//! What makes Postgres fast under load, each named for what it does: the write batcher gathers
//! concurrent writes of a kind into shared transactions, the read pool keeps connections for
//! the request path's single-statement reads, and event numbering gives audit events their
//! per-workspace sequence after their writer's commit. Each file says why, with figures.

mod event_numbering;
mod read_pool;
mod write_batcher;

pub(super) use event_numbering::Sequencer;
pub use event_numbering::{NUMBERING_PARTITIONS, numbering_partition};
pub(super) use read_pool::ReadPool;
pub(super) use write_batcher::{Batcher, Kind, Ran};
