//! Integration tests: the real HTTP surface on an ephemeral port, real Postgres, one database
//! per test.

mod activity;
mod audit_stream;
mod correlation;
mod dependencies;
mod framework_errors;
mod hardening;
mod helpers;
mod idempotency;
mod issue_token;
mod operation_auth;
mod operations;
mod policies;
mod rate_limits;
mod redis_outage;
mod replicas;
mod reviews;
mod revoke_token;
mod runners;
mod secrets;
mod signatures;
mod workflows;
