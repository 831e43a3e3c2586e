-- Runners and deliveries after the fact. The Postgres migration of the same name
-- says what each column means. Numbered 0014 to leave 0012 and 0013 to the work landing
-- beside it.
ALTER TABLE runners ADD COLUMN failing_since TEXT;
ALTER TABLE runners ADD COLUMN disabled_at TEXT;
ALTER TABLE runners ADD COLUMN disabled_reason TEXT;
ALTER TABLE runners ADD COLUMN removed_at TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN webhook_id BLOB;
ALTER TABLE webhook_deliveries ADD COLUMN resent_as BLOB;
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (updated_at) WHERE status = 'failed';
