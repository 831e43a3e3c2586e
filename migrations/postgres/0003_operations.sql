-- Runner pools, runners and their keys, commands and their webhook deliveries, workflow
-- revisions, and marketplace plugins with their reviews and reports.

CREATE TABLE runner_pools (
    id             uuid PRIMARY KEY,
    workspace_id   uuid NOT NULL REFERENCES workspaces (id),
    name           text NOT NULL,
    created_at     timestamptz NOT NULL,
    -- Soft delete: commands and audit events keep pointing at the pool.
    deleted_at     timestamptz,
    deleted_reason text
);
CREATE UNIQUE INDEX runner_pools_live_name ON runner_pools (workspace_id, name) WHERE deleted_at IS NULL;

CREATE TABLE runners (
    id         uuid PRIMARY KEY,
    pool_id    uuid NOT NULL REFERENCES runner_pools (id),
    name       text NOT NULL,
    created_at timestamptz NOT NULL
);

-- Several keys per runner, so a runner can rotate without downtime.
CREATE TABLE runner_keys (
    id         uuid PRIMARY KEY,
    runner_id  uuid NOT NULL REFERENCES runners (id),
    public_key bytea NOT NULL CHECK (length(public_key) = 32),
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX runner_keys_runner ON runner_keys (runner_id);

CREATE TABLE runner_commands (
    id              uuid PRIMARY KEY,
    workspace_id    uuid NOT NULL REFERENCES workspaces (id),
    pool_id         uuid NOT NULL REFERENCES runner_pools (id),
    environment_id  uuid REFERENCES environments (id),
    command         text NOT NULL,
    args            jsonb NOT NULL,
    timeout_seconds integer NOT NULL,
    status          text NOT NULL,
    submitted_by    uuid NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE INDEX runner_commands_pool_open ON runner_commands (pool_id)
    WHERE status IN ('queued', 'dispatched', 'running');

CREATE TABLE webhook_deliveries (
    id         uuid PRIMARY KEY,
    command_id uuid NOT NULL UNIQUE REFERENCES runner_commands (id),
    status     text NOT NULL,
    detail     text,
    exit_code  integer,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);

CREATE TABLE workflows (
    id           uuid PRIMARY KEY,
    workspace_id uuid NOT NULL REFERENCES workspaces (id),
    name         text NOT NULL,
    created_at   timestamptz NOT NULL,
    UNIQUE (workspace_id, name)
);

CREATE TABLE workflow_revisions (
    id              uuid PRIMARY KEY,
    workflow_id     uuid NOT NULL REFERENCES workflows (id),
    number          integer NOT NULL,
    state           text NOT NULL,
    requested_by    uuid,
    requested_at    timestamptz,
    request_comment text,
    created_at      timestamptz NOT NULL,
    UNIQUE (workflow_id, number)
);

CREATE TABLE plugins (
    id              uuid PRIMARY KEY,
    -- The publisher; reviews come from users of any organisation.
    organisation_id uuid NOT NULL REFERENCES organisations (id),
    name            text NOT NULL UNIQUE,
    created_at      timestamptz NOT NULL
);

CREATE TABLE plugin_reviews (
    id              uuid PRIMARY KEY,
    plugin_id       uuid NOT NULL REFERENCES plugins (id),
    author_id       uuid NOT NULL REFERENCES users (id),
    organisation_id uuid NOT NULL REFERENCES organisations (id),
    rating          smallint NOT NULL CHECK (rating BETWEEN 1 AND 5),
    title           text NOT NULL,
    body            text NOT NULL,
    status          text NOT NULL,
    reasons         text[] NOT NULL,
    labels          text[] NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    UNIQUE (plugin_id, author_id)
);

CREATE TABLE review_reports (
    id          uuid PRIMARY KEY,
    review_id   uuid NOT NULL REFERENCES plugin_reviews (id),
    reporter_id uuid NOT NULL REFERENCES users (id),
    reason      text NOT NULL,
    comment     text,
    created_at  timestamptz NOT NULL,
    UNIQUE (review_id, reporter_id)
);
