-- Policy components: versions, activations (with history for rollback), shadows and what the
-- shadows disagreed on.

CREATE TABLE policies (
    id         BLOB PRIMARY KEY,
    name       TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('authorizer', 'moderator')),
    version    INTEGER NOT NULL,
    digest     TEXT NOT NULL,
    bytes      BLOB NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (name, version)
) STRICT;

-- The active policy of a kind is the newest activation not rolled back; none means the
-- built-in default. Rolling back marks the newest one rolled back. AUTOINCREMENT keeps ids
-- increasing, as "newest" is the highest id.
CREATE TABLE policy_activations (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    kind         TEXT NOT NULL,
    policy_id    BLOB NOT NULL REFERENCES policies (id),
    activated_at TEXT NOT NULL,
    rolled_back  INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX policy_activations_kind ON policy_activations (kind, id DESC);

CREATE TABLE policy_shadows (
    kind       TEXT PRIMARY KEY,
    policy_id  BLOB NOT NULL REFERENCES policies (id),
    started_at TEXT NOT NULL
) STRICT;

CREATE TABLE shadow_disagreements (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    shadow_digest   TEXT NOT NULL,
    operation       TEXT NOT NULL,
    principal_id    TEXT NOT NULL,
    active_decision TEXT NOT NULL,
    shadow_decision TEXT NOT NULL,
    occurred_at     TEXT NOT NULL
) STRICT;

-- Bumped by every change that the server must pick up (it polls the generation).
CREATE TABLE policy_state (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
) STRICT;
INSERT INTO policy_state (id, generation) VALUES (1, 0);
