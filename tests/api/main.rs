//! Integration tests: the real HTTP surface on an ephemeral port, one records store per test:
//! a Postgres database, or an SQLite file with `TEST_RECORDS=sqlite` (tests named
//! `postgres_only_*` and `redis_only_*` skip themselves on that run).

mod activity;
mod audit_stream;
mod correlation;
mod dependencies;
mod embedded;
mod framework_errors;
mod hardening;
mod helpers;
mod idempotency;
mod issue_token;
mod lineage;
mod operation_auth;
mod ops_endpoints;
mod policies;
mod rate_limits;
mod redis_outage;
mod replicas;
mod reviews;
mod revoke_token;
mod runners;
mod secrets;
mod signatures;
mod time_format;
mod workflows;
