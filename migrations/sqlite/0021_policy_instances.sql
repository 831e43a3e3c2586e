-- How a version's decisions get their instances, chosen at install: a fresh one for every
-- decision (every version installed before this column), or warm ones per organisation.
ALTER TABLE policies ADD COLUMN instances TEXT NOT NULL DEFAULT 'fresh'
    CHECK (instances IN ('fresh', 'per-organisation'));
