-- The audit log's hash chain, retention and checkpoints.
--
-- Each workspace event carries `hash` = SHA-256(previous hash || canonical form of the event),
-- computed where its sequence is given (the numbering pass, `throughput/event_numbering.rs`);
-- `workspaces.audit_hash` is the head of the chain, next to `audit_seq`. Events written before
-- this migration are left unhashed: every workspace that has events gets a checkpoint at its
-- current head with no hash, and its chain begins after it (from 32 zero bytes, as a new
-- workspace's does). Events still waiting for their number are numbered, and hashed, after it.
ALTER TABLE audit_events ADD COLUMN hash bytea;
ALTER TABLE workspaces ADD COLUMN audit_hash bytea;

-- How long an organisation keeps its audit events, in seconds; NULL keeps them forever.
ALTER TABLE organisations ADD COLUMN audit_retention_seconds bigint;

-- Where a workspace's chain starts again: the last sequence removed (by retention, or the head
-- when this migration ran), that event's hash (NULL: the chain starts from zero bytes), and how
-- many events that step removed. `cpctl audit verify` starts from the highest.
CREATE TABLE audit_checkpoints (
    workspace_id uuid NOT NULL REFERENCES workspaces (id),
    last_seq     bigint NOT NULL,
    hash         bytea,
    removed      bigint NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, last_seq)
);

INSERT INTO audit_checkpoints (workspace_id, last_seq, hash, removed, created_at)
SELECT id, audit_seq, NULL, 0, now() FROM workspaces WHERE audit_seq > 0;
