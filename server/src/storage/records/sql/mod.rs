//! The statements both SQL backends run, one file per port, generic over the backend's
//! [`Dialect`](super::dialect::Dialect): each port is implemented once, for every `S: Dialect`.
//! sqlx takes `$n` placeholders on both backends, and most statements read the same; what does
//! not is the dialect's. Statements are built and run as [`Stmt`]s.

pub(super) mod audit;
mod audit_integrity;
mod commands;
pub(super) mod copy;
mod deliveries;
mod delivery_admin;
mod directory;
mod marketplace;
pub(super) mod outcomes;
mod policies;
mod policy_budgets;
mod policy_decisions;
mod runner_admin;
mod runners;
mod settings;
mod stmt;
pub(super) mod tokens;
mod workflows;

pub(crate) use self::stmt::{Done, List, ListParam, On, Param, Rows, Stmt, run_statements};
