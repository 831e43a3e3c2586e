-- Offboarding: a disabled user's tokens stop authenticating (authentication joins users), and
-- enabling the user brings back those still otherwise live. The reason is the administrator's
-- free text, shown by `cpctl users show`.
ALTER TABLE users ADD COLUMN disabled_at timestamptz;
ALTER TABLE users ADD COLUMN disabled_reason text;

-- Rotation: a token keeps its id, grants, scopes, expiry, environments and lineage and gets a new
-- public id and secret hash in `tokens`; the replaced ones move here and keep authenticating
-- until `valid_until` (the grace; the rotation's instant when there is none).
CREATE TABLE token_previous_secrets (
    public_id   text PRIMARY KEY,
    token_id    uuid NOT NULL REFERENCES tokens (id),
    secret_hash bytea NOT NULL,
    replaced_at timestamptz NOT NULL,
    valid_until timestamptz NOT NULL
);
CREATE INDEX token_previous_secrets_token ON token_previous_secrets (token_id);
