//! Integration tests: the real HTTP surface on an ephemeral port, real Postgres, one database
//! per test.

mod activity;
mod correlation;
mod dependencies;
mod framework_errors;
mod hardening;
mod helpers;
mod idempotency;
mod issue_token;
mod operations;
mod pending_routes;
mod policies;
mod rate_limits;
mod redis_outage;
mod replicas;
mod revoke_token;
mod secrets;
