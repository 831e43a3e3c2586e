-- Audit events are numbered after their transaction commits (issue #17). A write no longer
-- takes its workspace's row lock for the next sequence and holds it through its commit's WAL
-- flush: it inserts its events without a sequence, commits, and one short sequencing
-- transaction then numbers every committed event still waiting, workspace by workspace, in
-- the order they were appended (`storage/postgres/sequencer.rs`). Readers only ever see
-- numbered events.
ALTER TABLE audit_events DROP CONSTRAINT IF EXISTS audit_events_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_seq_needs_workspace
    CHECK (workspace_id IS NOT NULL OR seq IS NULL);

-- The order events were appended in, which numbers events committed together. Events written
-- before this migration are numbered already and keep NULL.
CREATE SEQUENCE audit_events_appended;
ALTER TABLE audit_events ADD COLUMN appended bigint;
ALTER TABLE audit_events ALTER COLUMN appended SET DEFAULT nextval('audit_events_appended');
ALTER SEQUENCE audit_events_appended OWNED BY audit_events.appended;
CREATE INDEX audit_events_unsequenced ON audit_events (appended)
    WHERE seq IS NULL AND workspace_id IS NOT NULL;
