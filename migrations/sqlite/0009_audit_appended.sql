-- Postgres numbers audit events after commit and orders the events waiting for a number by
-- this column (see the Postgres migration `0008_audit_sequencer`). SQLite numbers each event
-- as it is inserted, under its single writer, and leaves it NULL; the column exists so both
-- stores hold the same columns and `cpctl store copy` moves events either way.
ALTER TABLE audit_events ADD COLUMN appended INTEGER;
