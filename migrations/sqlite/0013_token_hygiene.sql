-- Token hygiene. The Postgres migration of the same name says what each column
-- means. Numbered 0013 to leave 0012 to the work landing beside it.
ALTER TABLE tokens ADD COLUMN last_used_at TEXT;
ALTER TABLE tokens ADD COLUMN last_used_address TEXT;
ALTER TABLE tokens ADD COLUMN last_used_agent TEXT;
ALTER TABLE tokens ADD COLUMN expiry_notice_at TEXT;
CREATE INDEX tokens_expiry_notice_due ON tokens (expires_at)
    WHERE revoked_at IS NULL AND expiry_notice_at IS NULL;
