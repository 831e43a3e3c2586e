-- The embedded default's idempotency records, stored-bytes quota counts and runner nonces, kept
-- in the file so a restart loses neither replays nor replay protection (Redis holds them when
-- REDIS_URL is set; these tables then stay empty). Keys are the fast-state keys of
-- `storage/keys.rs`. Expiries are Unix milliseconds: an expired row is absent to every reader
-- and purged in the background.

-- A claim in flight (`owner` set, `record` NULL) or a finished response (`owner` NULL,
-- `record` the sealed response: encrypted before it gets here).
CREATE TABLE embedded_idempotency_records (
    key         TEXT PRIMARY KEY,
    owner       TEXT,
    fingerprint TEXT NOT NULL,
    record      BLOB,
    expires_at  INTEGER NOT NULL,
    CHECK ((owner IS NULL) <> (record IS NULL))
) STRICT;
CREATE INDEX embedded_idempotency_records_expiry ON embedded_idempotency_records (expires_at);

CREATE TABLE embedded_idempotency_quotas (
    key            TEXT PRIMARY KEY,
    bytes          INTEGER NOT NULL,
    window_ends_at INTEGER NOT NULL
) STRICT;
CREATE INDEX embedded_idempotency_quotas_expiry ON embedded_idempotency_quotas (window_ends_at);

CREATE TABLE embedded_nonces (
    key        TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX embedded_nonces_expiry ON embedded_nonces (expires_at);
