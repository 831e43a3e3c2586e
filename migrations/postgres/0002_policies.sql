-- Policy components: versions, activations (with history for rollback), shadows and what the
-- shadows disagreed on.

CREATE TABLE policies (
    id         uuid PRIMARY KEY,
    name       text NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('authorizer', 'moderator')),
    version    integer NOT NULL,
    digest     text NOT NULL,
    bytes      bytea NOT NULL,
    created_at timestamptz NOT NULL,
    UNIQUE (name, version)
);

-- The active policy of a kind is the newest activation not rolled back; none means the
-- built-in default. Rolling back marks the newest one rolled back.
CREATE TABLE policy_activations (
    id           bigserial PRIMARY KEY,
    kind         text NOT NULL,
    policy_id    uuid NOT NULL REFERENCES policies (id),
    activated_at timestamptz NOT NULL,
    rolled_back  boolean NOT NULL DEFAULT false
);
CREATE INDEX policy_activations_kind ON policy_activations (kind, id DESC);

CREATE TABLE policy_shadows (
    kind       text PRIMARY KEY,
    policy_id  uuid NOT NULL REFERENCES policies (id),
    started_at timestamptz NOT NULL
);

CREATE TABLE shadow_disagreements (
    id              bigserial PRIMARY KEY,
    shadow_digest   text NOT NULL,
    operation       text NOT NULL,
    principal_id    text NOT NULL,
    active_decision text NOT NULL,
    shadow_decision text NOT NULL,
    occurred_at     timestamptz NOT NULL
);

-- Bumped by every change that replicas must pick up (they also LISTEN on cp_policy).
CREATE TABLE policy_state (
    id         integer PRIMARY KEY CHECK (id = 1),
    generation bigint NOT NULL
);
INSERT INTO policy_state (id, generation) VALUES (1, 0);
