-- Runner pools, runners and their keys, commands and their webhook deliveries, workflow
-- revisions, and marketplace plugins with their reviews and reports.

CREATE TABLE runner_pools (
    id             BLOB PRIMARY KEY,
    workspace_id   BLOB NOT NULL REFERENCES workspaces (id),
    name           TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    -- Soft delete: commands and audit events keep pointing at the pool.
    deleted_at     TEXT,
    deleted_reason TEXT
) STRICT;
CREATE UNIQUE INDEX runner_pools_live_name ON runner_pools (workspace_id, name) WHERE deleted_at IS NULL;

CREATE TABLE runners (
    id         BLOB PRIMARY KEY,
    pool_id    BLOB NOT NULL REFERENCES runner_pools (id),
    name       TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;

-- Several keys per runner, so a runner can rotate without downtime.
CREATE TABLE runner_keys (
    id         BLOB PRIMARY KEY,
    runner_id  BLOB NOT NULL REFERENCES runners (id),
    public_key BLOB NOT NULL CHECK (length(public_key) = 32),
    created_at TEXT NOT NULL,
    revoked_at TEXT
) STRICT;
CREATE INDEX runner_keys_runner ON runner_keys (runner_id);

CREATE TABLE runner_commands (
    id              BLOB PRIMARY KEY,
    workspace_id    BLOB NOT NULL REFERENCES workspaces (id),
    pool_id         BLOB NOT NULL REFERENCES runner_pools (id),
    environment_id  BLOB REFERENCES environments (id),
    command         TEXT NOT NULL,
    -- JSON array of strings.
    args            TEXT NOT NULL,
    timeout_seconds INTEGER NOT NULL,
    status          TEXT NOT NULL,
    submitted_by    BLOB NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
) STRICT;
CREATE INDEX runner_commands_pool_open ON runner_commands (pool_id)
    WHERE status IN ('queued', 'dispatched', 'running');

CREATE TABLE webhook_deliveries (
    id         BLOB PRIMARY KEY,
    command_id BLOB NOT NULL UNIQUE REFERENCES runner_commands (id),
    status     TEXT NOT NULL,
    detail     TEXT,
    exit_code  INTEGER,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
) STRICT;

CREATE TABLE workflows (
    id           BLOB PRIMARY KEY,
    workspace_id BLOB NOT NULL REFERENCES workspaces (id),
    name         TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    UNIQUE (workspace_id, name)
) STRICT;

CREATE TABLE workflow_revisions (
    id              BLOB PRIMARY KEY,
    workflow_id     BLOB NOT NULL REFERENCES workflows (id),
    number          INTEGER NOT NULL,
    state           TEXT NOT NULL,
    requested_by    BLOB,
    requested_at    TEXT,
    request_comment TEXT,
    created_at      TEXT NOT NULL,
    UNIQUE (workflow_id, number)
) STRICT;

CREATE TABLE plugins (
    id              BLOB PRIMARY KEY,
    -- The publisher; reviews come from users of any organisation.
    organisation_id BLOB NOT NULL REFERENCES organisations (id),
    name            TEXT NOT NULL UNIQUE,
    created_at      TEXT NOT NULL
) STRICT;

CREATE TABLE plugin_reviews (
    id              BLOB PRIMARY KEY,
    plugin_id       BLOB NOT NULL REFERENCES plugins (id),
    author_id       BLOB NOT NULL REFERENCES users (id),
    organisation_id BLOB NOT NULL REFERENCES organisations (id),
    rating          INTEGER NOT NULL CHECK (rating BETWEEN 1 AND 5),
    title           TEXT NOT NULL,
    body            TEXT NOT NULL,
    status          TEXT NOT NULL,
    -- JSON arrays of strings.
    reasons         TEXT NOT NULL,
    labels          TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    UNIQUE (plugin_id, author_id)
) STRICT;

CREATE TABLE review_reports (
    id          BLOB PRIMARY KEY,
    review_id   BLOB NOT NULL REFERENCES plugin_reviews (id),
    reporter_id BLOB NOT NULL REFERENCES users (id),
    reason      TEXT NOT NULL,
    comment     TEXT,
    created_at  TEXT NOT NULL,
    UNIQUE (review_id, reporter_id)
) STRICT;
