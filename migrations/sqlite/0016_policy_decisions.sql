-- The policy decision log. The Postgres migration 0015_policy_decisions.sql says what each
-- column means.
CREATE TABLE policy_decisions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    occurred_at     TEXT NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('authorizer', 'moderator')),
    operation       TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    failure         TEXT,
    reason          TEXT,
    policy_name     TEXT NOT NULL,
    policy_version  INTEGER NOT NULL,
    policy_digest   TEXT NOT NULL,
    latency_us      INTEGER NOT NULL,
    correlation_id  TEXT,
    organisation_id BLOB,
    workspace_id    BLOB
) STRICT;
CREATE INDEX policy_decisions_occurred ON policy_decisions (occurred_at);
