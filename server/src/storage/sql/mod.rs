//! The implementations of the records ports that both SQL adapters share.
//!
//! Each file here is compiled twice, as a child module of the port file of the same name in
//! `postgres/` and in `sqlite/` (`#[path = "../sql/<port>.rs"] mod shared;`), so one text serves
//! both backends without generics over `sqlx::Database` (whose bounds would name every bound
//! type). sqlx accepts `$n` placeholders on both, and most statements read the same; what does
//! not is a backend primitive, imported by name:
//! - from the adapter's root (`super::super`): `Store`, `begin`/`commit`, `insert_event`,
//!   `map_err`, the row and list-column types with `list_param`/`decode_list`/`json_param`,
//!   `in_uuid_list`, and the row-lock clauses `FOR_UPDATE`/`FOR_SHARE` (empty on SQLite, whose
//!   write transactions hold the database's write lock from their start);
//! - from the port file (`super`): the statements whose SQL differs, such as the read lane's
//!   queries on Postgres.
//!
//! The rules these transactions enforce (name taken, the active-token cap, ...) are decided in
//! `storage::rules`; a statement here only counts or changes rows under the lock.
