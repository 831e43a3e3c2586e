//! The statements both SQL backends run, one file per port. This module is compiled inside
//! each adapter (`#[path = "../sql/mod.rs"] mod sql;` in `postgres/mod.rs` and `sqlite/mod.rs`),
//! where `Store` is that adapter's store; everything it needs of the backend comes from
//! `Store`'s [`Dialect`] implementation, bound here under the names the statements use.
//! sqlx takes `$n` placeholders on both backends, and most statements read the same.

mod audit;
mod commands;
pub(super) mod copy;
mod deliveries;
mod directory;
mod marketplace;
pub(super) mod outcomes;
mod policies;
mod runners;
mod settings;
mod tokens;
mod workflows;

use super::Store;
use crate::storage::records::dialect::{self, Dialect};

type Db = <Store as Dialect>::DB;
type Connection = dialect::Conn<Store>;
type Row = dialect::RowOf<Store>;
/// A list column as this backend decodes it ([`Dialect::decode_list`]).
type List<T> = <Store as Dialect>::List<T>;

const FOR_UPDATE: &str = <Store as Dialect>::FOR_UPDATE;
const FOR_SHARE: &str = <Store as Dialect>::FOR_SHARE;
const LEASE_LOCK: &str = <Store as Dialect>::LEASE_LOCK;
const TOKEN_COLUMNS: &str = <Store as Dialect>::TOKEN_COLUMNS;
