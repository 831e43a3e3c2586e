-- Runners and deliveries after the fact: a runner disabled after sustained failure
-- or by an administrator, a runner removed, and a failed delivery resent. Numbered 0013 to leave
-- 0011 and 0012 to the work landing beside it.

-- When the runner's current run of failed attempts began; meaningful while
-- `consecutive_failures` > 0 (a failure that finds the count at 0 sets it).
ALTER TABLE runners ADD COLUMN failing_since timestamptz;
-- A disabled runner is never chosen for an attempt. Set by the automatic rule or by
-- `cpctl runners disable`; cleared by `cpctl runners enable`.
ALTER TABLE runners ADD COLUMN disabled_at timestamptz;
-- `consecutive_failures` or `admin`.
ALTER TABLE runners ADD COLUMN disabled_reason text;
-- `cpctl runners remove`: its keys are revoked and it is never chosen again. The row stays, for
-- the attempts and events that name it.
ALTER TABLE runners ADD COLUMN removed_at timestamptz;

-- The `webhook-id` its attempts carry when it is not the delivery's own id: a delivery created
-- by resending a failed one carries the failed one's, so a receiver deduplicating on it runs
-- the command once.
ALTER TABLE webhook_deliveries ADD COLUMN webhook_id uuid;
-- The delivery a resend of this failed one created; a delivery is resent at most once.
ALTER TABLE webhook_deliveries ADD COLUMN resent_as uuid;
-- `cpctl deliveries list --state failed --since T` and `recover` read a pool's failures by time.
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (updated_at) WHERE status = 'failed';
