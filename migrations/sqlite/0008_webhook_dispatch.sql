-- Outgoing webhook deliveries (issue #16): where a runner receives commands, which runners keep
-- failing, when a delivery's next attempt is due, and every attempt made. The Postgres migration
-- of the same name says what each column means.
ALTER TABLE runners ADD COLUMN delivery_url TEXT;
ALTER TABLE runners ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runners ADD COLUMN last_chosen_at TEXT;

ALTER TABLE webhook_deliveries ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_deliveries ADD COLUMN next_attempt_at TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN waiting_for_runner INTEGER NOT NULL DEFAULT 0;
UPDATE webhook_deliveries SET next_attempt_at = created_at WHERE status = 'pending';
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;

CREATE TABLE webhook_attempts (
    delivery_id BLOB NOT NULL REFERENCES webhook_deliveries (id),
    number      INTEGER NOT NULL,
    runner_id   BLOB NOT NULL REFERENCES runners (id),
    url         TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    status_code INTEGER,
    latency_ms  INTEGER,
    error       TEXT,
    PRIMARY KEY (delivery_id, number)
) STRICT;
