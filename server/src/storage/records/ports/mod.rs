//! The records ports: one module per concern, each with its trait and the records it carries.
//! The SQL adapters (`postgres/`, `sqlite/`) implement them with one file per port of the same
//! name.

mod audit;
mod audit_integrity;
mod commands;
mod deliveries;
mod directory;
mod fleet;
mod marketplace;
mod outcomes;
mod policies;
mod policy_budgets;
mod policy_decisions;
mod runners;
mod settings;
mod tokens;
mod workflows;

pub use audit::*;
pub use audit_integrity::*;
pub use commands::*;
pub use deliveries::*;
pub use directory::*;
pub use fleet::*;
pub use marketplace::*;
pub use outcomes::*;
pub use policies::*;
pub use policy_budgets::*;
pub use policy_decisions::*;
pub use runners::*;
pub use settings::*;
pub use tokens::*;
pub use workflows::*;
