-- The policy decision log: a sample of allowed decisions and every deny and failure, written in
-- batches off the request path and pruned to a row count and an age (docs/operations.md,
-- "Policy decision logs and metrics"). One log for the deployment, not one per organisation
-- (docs/decisions.md). No request body or principal secret is stored: what was asked is the
-- operation, who asked is the organisation and workspace, and the correlation id leads to the
-- request's log lines and audit events.
CREATE TABLE policy_decisions (
    id              bigserial PRIMARY KEY,
    occurred_at     timestamptz NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('authorizer', 'moderator')),
    operation       text NOT NULL,
    outcome         text NOT NULL,
    failure         text,
    reason          text,
    policy_name     text NOT NULL,
    policy_version  integer NOT NULL,
    policy_digest   text NOT NULL,
    latency_us      bigint NOT NULL,
    correlation_id  text,
    organisation_id uuid,
    workspace_id    uuid
);
-- Newest first, and pruning by age, both walk this.
CREATE INDEX policy_decisions_occurred ON policy_decisions (occurred_at);
