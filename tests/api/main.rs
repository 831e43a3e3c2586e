//! Integration tests: the real HTTP surface on an ephemeral port, one records store per test:
//! a Postgres database, or an SQLite file with `TEST_RECORDS=sqlite` or when Postgres does not
//! answer. Tests named `postgres_only_*` and `redis_only_*` say what they need with
//! `needs!(…)` and skip themselves, with one line, on a run without it.

mod activity;
mod admin_audit;
mod admin_deliveries;
mod admin_directory;
mod admin_fleet;
mod admin_marketplace;
mod admin_policies;
mod admin_tokens;
mod admin_users;
mod admin_workflows;
mod audit_proofs;
mod audit_retention;
mod audit_stream;
mod audit_stream_ends;
mod caller;
mod connections;
mod console;
mod correlation;
mod deliveries;
mod delivery_reports;
mod dependencies;
mod dispatch_audience;
mod embedded;
mod fair_delivery;
mod framework_errors;
mod hardening;
mod idempotency;
mod issue_token;
mod key_wrapping;
mod lineage;
mod offboarding;
mod operation_auth;
mod ops_endpoints;
mod outcomes;
mod own_tokens;
#[path = "../support/pg_replica.rs"]
mod pg_replica;
mod policies;
mod policy_budgets;
mod policy_decisions;
mod policy_instances;
mod policy_languages;
mod rate_limits;
mod read_replicas;
#[path = "../support/redis_cluster.rs"]
mod redis_cluster;
mod redis_cluster_outage;
mod redis_outage;
mod replicas;
mod response_schemas;
mod reviews;
mod revoke_token;
mod roles;
mod runner_admin;
mod runners;
mod secrets;
#[path = "../support/services.rs"]
mod services;
mod signatures;
mod support;
mod tenancy;
mod time_format;
mod timeouts;
mod token_hygiene;
mod webhook_keys;
mod workflows;
