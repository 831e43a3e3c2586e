-- Token hygiene.

-- The token's last use, written in the background at most about once a minute per token (a
-- claim in fast state coalesces the requests of every replica): when, from which client
-- address, and the user agent it sent (at most 256 characters; stored, never logged). NULL
-- until the first use is recorded.
ALTER TABLE tokens ADD COLUMN last_used_at timestamptz;
ALTER TABLE tokens ADD COLUMN last_used_address text;
ALTER TABLE tokens ADD COLUMN last_used_agent text;
-- When the `token.expiring` events were written: set in their transaction by the one replica
-- whose conditional update claimed the token, so the notice is given once.
ALTER TABLE tokens ADD COLUMN expiry_notice_at timestamptz;
-- The notice task's look for live tokens near their expiry that have had no notice yet.
CREATE INDEX tokens_expiry_notice_due ON tokens (expires_at)
    WHERE revoked_at IS NULL AND expiry_notice_at IS NULL;
