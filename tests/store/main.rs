//! Store-level tests: the records store's ports driven directly, beneath HTTP, each test run
//! against both adapters (a fresh Postgres database and a fresh SQLite file) in one run, so a
//! promise of a port is checked on every backend without a second test run.

mod audit_chain;
mod roles;
mod support;
mod token_hygiene;
mod token_issuance;
mod write_context;
