-- Each runner's own Standard Webhooks secret, sealed (never in the clear). A rotation moves the
-- current secret to `previous_webhook_secret`, which signs too until `previous_retires_at`, so
-- a runner configured with either verifies during the overlap. Runners registered before this
-- migration have none until their secret is rotated.
ALTER TABLE runners ADD COLUMN webhook_secret bytea;
ALTER TABLE runners ADD COLUMN previous_webhook_secret bytea;
ALTER TABLE runners ADD COLUMN previous_retires_at timestamptz;
