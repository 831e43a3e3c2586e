-- Fair delivery (issue #26): a breaker for runners that keep answering slowly. The Postgres
-- migration of the same name says what each column means. Numbered 0011 to leave 0010 to the
-- runner secrets work landing beside it.
ALTER TABLE runners ADD COLUMN slow_streak INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runners ADD COLUMN held_until TEXT;
CREATE INDEX runners_held ON runners (held_until) WHERE held_until IS NOT NULL;
