-- Organisations, workspaces, environments, users, tokens and the audit log.

CREATE TABLE settings (
    key        text PRIMARY KEY,
    value      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE organisations (
    id         uuid PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);

CREATE TABLE workspaces (
    id              uuid PRIMARY KEY,
    organisation_id uuid NOT NULL REFERENCES organisations (id),
    name            text NOT NULL,
    -- Last audit sequence handed out: incremented under the row lock, so sequences are gapless.
    audit_seq       bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    UNIQUE (organisation_id, name)
);

CREATE TABLE environments (
    id           uuid PRIMARY KEY,
    workspace_id uuid NOT NULL REFERENCES workspaces (id),
    name         text NOT NULL,
    created_at   timestamptz NOT NULL,
    UNIQUE (workspace_id, name)
);

CREATE TABLE users (
    id              uuid PRIMARY KEY,
    organisation_id uuid NOT NULL REFERENCES organisations (id),
    email           text NOT NULL,
    created_at      timestamptz NOT NULL,
    UNIQUE (organisation_id, email)
);

CREATE TABLE tokens (
    id              uuid PRIMARY KEY,
    public_id       text NOT NULL UNIQUE,
    user_id         uuid NOT NULL REFERENCES users (id),
    organisation_id uuid NOT NULL REFERENCES organisations (id),
    name            text NOT NULL,
    secret_hash     bytea NOT NULL,
    scopes          text[] NOT NULL,
    environment_ids uuid[] NOT NULL,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    revoked_at      timestamptz
);
CREATE INDEX tokens_owner_active ON tokens (user_id, name) WHERE revoked_at IS NULL;

CREATE TABLE token_workspaces (
    token_id       uuid NOT NULL REFERENCES tokens (id),
    workspace_id   uuid NOT NULL REFERENCES workspaces (id),
    position       integer NOT NULL,
    revoked_at     timestamptz,
    revoked_reason text,
    PRIMARY KEY (token_id, workspace_id)
);
CREATE INDEX token_workspaces_workspace ON token_workspaces (workspace_id);

CREATE TABLE audit_events (
    id              uuid PRIMARY KEY,
    organisation_id uuid NOT NULL REFERENCES organisations (id),
    workspace_id    uuid REFERENCES workspaces (id),
    seq             bigint,
    event_type      text NOT NULL,
    actor_kind      text NOT NULL,
    actor_id        uuid,
    target_kind     text NOT NULL,
    target_id       uuid NOT NULL,
    correlation_id  text NOT NULL,
    occurred_at     timestamptz NOT NULL,
    data            jsonb NOT NULL,
    UNIQUE (workspace_id, seq),
    CHECK ((workspace_id IS NULL) = (seq IS NULL))
);
