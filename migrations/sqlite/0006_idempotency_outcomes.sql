-- The committed outcome of a request sent with an Idempotency-Key: the sealed response it
-- answered, written in the same transaction as its change (`http/idempotency.rs`). A retry
-- whose fast-state record is missing or stale finds it here before anything runs, and the
-- primary key refuses a second change under the same key. `place` is the idempotency record's
-- key (principal, method, operation, key); `sealed` is encrypted before it gets here; expiries
-- are Unix milliseconds, and expired rows are purged in the background.
CREATE TABLE idempotency_outcomes (
    place       TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    sealed      BLOB NOT NULL,
    expires_at  INTEGER NOT NULL
) STRICT;
CREATE INDEX idempotency_outcomes_expiry ON idempotency_outcomes (expires_at);
