-- Fair delivery (issue #26): a breaker for runners that keep answering slowly. Numbered 0010 to
-- leave 0009 to the runner secrets work landing beside it.

-- Attempts to this runner in a row that timed out or took at least `--delivery-slow-ms`; reset
-- by any attempt that did not.
ALTER TABLE runners ADD COLUMN slow_streak integer NOT NULL DEFAULT 0;
-- The runner's breaker: NULL when closed. Set to the end of a cool-down when `slow_streak`
-- reaches `--delivery-breaker-after` (open: nothing is sent to it until then), and past that
-- time one attempt at a time is let through (half-open: a lease taking one sets this to the end
-- of that attempt's lease). An attempt that is not slow sets it back to NULL.
ALTER TABLE runners ADD COLUMN held_until timestamptz;
-- Few runners are ever held: the lease's look for pools with only held runners reads these.
CREATE INDEX runners_held ON runners (held_until) WHERE held_until IS NOT NULL;
