-- Outgoing webhook deliveries (issue #16): where a runner receives commands, which runners keep
-- failing, when a delivery's next attempt is due, and every attempt made.

-- A runner without a URL receives nothing (it reports through the signed route on its own).
ALTER TABLE runners ADD COLUMN delivery_url text;
-- Attempts to this runner that failed in a row; a runner with several is skipped while another
-- runner of its pool is not failing. Reset by any 2xx.
ALTER TABLE runners ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0;
-- When this runner was last chosen, so a pool's healthy runners take turns.
ALTER TABLE runners ADD COLUMN last_chosen_at timestamptz;

-- Attempts started so far.
ALTER TABLE webhook_deliveries ADD COLUMN attempts integer NOT NULL DEFAULT 0;
-- When the next attempt is due; NULL when nothing is left to send (a runner answered 2xx, the
-- schedule ran out, or the delivery left `pending`). A replica leasing an attempt moves it past
-- the attempt's total timeout: that is the lease, and a replica that dies mid-attempt releases
-- it by letting that time pass.
ALTER TABLE webhook_deliveries ADD COLUMN next_attempt_at timestamptz;
-- No runner of the pool could receive it (none has a delivery URL and a live key): it is sent
-- when one can (a URL set, a runner registered with one, a key added), not polled meanwhile.
ALTER TABLE webhook_deliveries ADD COLUMN waiting_for_runner boolean NOT NULL DEFAULT false;
-- Deliveries created before dispatch existed were never sent: send the pending ones now.
UPDATE webhook_deliveries SET next_attempt_at = created_at WHERE status = 'pending';
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;

CREATE TABLE webhook_attempts (
    delivery_id uuid NOT NULL REFERENCES webhook_deliveries (id),
    -- 1 for the first attempt; an attempt's webhook-id is its delivery's id whatever the number.
    number      integer NOT NULL,
    runner_id   uuid NOT NULL REFERENCES runners (id),
    url         text NOT NULL,
    started_at  timestamptz NOT NULL,
    -- NULL while in flight, or forever when the replica sending it died (shown as abandoned).
    finished_at timestamptz,
    status_code integer,
    latency_ms  integer,
    error       text,
    PRIMARY KEY (delivery_id, number)
);
