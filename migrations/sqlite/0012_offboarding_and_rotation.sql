-- Offboarding and rotation: see migrations/postgres/0011_offboarding_and_rotation.sql.
ALTER TABLE users ADD COLUMN disabled_at TEXT;
ALTER TABLE users ADD COLUMN disabled_reason TEXT;

CREATE TABLE token_previous_secrets (
    public_id   TEXT PRIMARY KEY,
    token_id    BLOB NOT NULL REFERENCES tokens (id),
    secret_hash BLOB NOT NULL,
    replaced_at TEXT NOT NULL,
    valid_until TEXT NOT NULL
) STRICT;
CREATE INDEX token_previous_secrets_token ON token_previous_secrets (token_id);
