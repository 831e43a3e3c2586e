-- Organisations, workspaces, environments, users, tokens and the audit log.
-- SQLite port of migrations/postgres: uuids are 16-byte BLOBs, times RFC 3339 TEXT in UTC (so
-- text order is time order), arrays JSON TEXT, booleans INTEGER. STRICT makes a value of the
-- wrong type an error instead of a silently mismatching row.

CREATE TABLE settings (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
) STRICT;

CREATE TABLE organisations (
    id         BLOB PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
) STRICT;

CREATE TABLE workspaces (
    id              BLOB PRIMARY KEY,
    organisation_id BLOB NOT NULL REFERENCES organisations (id),
    name            TEXT NOT NULL,
    -- Last audit sequence handed out: incremented under the write lock, so sequences are gapless.
    audit_seq       INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    UNIQUE (organisation_id, name)
) STRICT;

CREATE TABLE environments (
    id           BLOB PRIMARY KEY,
    workspace_id BLOB NOT NULL REFERENCES workspaces (id),
    name         TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    UNIQUE (workspace_id, name)
) STRICT;

CREATE TABLE users (
    id              BLOB PRIMARY KEY,
    organisation_id BLOB NOT NULL REFERENCES organisations (id),
    email           TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    UNIQUE (organisation_id, email)
) STRICT;

CREATE TABLE tokens (
    id              BLOB PRIMARY KEY,
    public_id       TEXT NOT NULL UNIQUE,
    user_id         BLOB NOT NULL REFERENCES users (id),
    organisation_id BLOB NOT NULL REFERENCES organisations (id),
    name            TEXT NOT NULL,
    secret_hash     BLOB NOT NULL,
    -- JSON arrays of strings and of uuid strings.
    scopes          TEXT NOT NULL,
    environment_ids TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    expires_at      TEXT NOT NULL,
    revoked_at      TEXT
) STRICT;
CREATE INDEX tokens_owner_active ON tokens (user_id, name) WHERE revoked_at IS NULL;

CREATE TABLE token_workspaces (
    token_id       BLOB NOT NULL REFERENCES tokens (id),
    workspace_id   BLOB NOT NULL REFERENCES workspaces (id),
    position       INTEGER NOT NULL,
    revoked_at     TEXT,
    revoked_reason TEXT,
    PRIMARY KEY (token_id, workspace_id)
) STRICT;
CREATE INDEX token_workspaces_workspace ON token_workspaces (workspace_id);

CREATE TABLE audit_events (
    id              BLOB PRIMARY KEY,
    organisation_id BLOB NOT NULL REFERENCES organisations (id),
    workspace_id    BLOB REFERENCES workspaces (id),
    seq             INTEGER,
    event_type      TEXT NOT NULL,
    actor_kind      TEXT NOT NULL,
    actor_id        BLOB,
    target_kind     TEXT NOT NULL,
    target_id       BLOB NOT NULL,
    correlation_id  TEXT NOT NULL,
    occurred_at     TEXT NOT NULL,
    -- JSON text, passed through to readers as stored.
    data            TEXT NOT NULL,
    UNIQUE (workspace_id, seq),
    CHECK ((workspace_id IS NULL) = (seq IS NULL))
) STRICT;
