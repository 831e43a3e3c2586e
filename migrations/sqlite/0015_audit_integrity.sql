-- The audit log's hash chain, retention and checkpoints; see the Postgres
-- migration `0014_audit_integrity`. SQLite hashes each event as it numbers it, at insert.
-- Events written before this migration are left unhashed, behind a checkpoint at each
-- workspace's head.
ALTER TABLE audit_events ADD COLUMN hash BLOB;
ALTER TABLE workspaces ADD COLUMN audit_hash BLOB;
ALTER TABLE organisations ADD COLUMN audit_retention_seconds INTEGER;

CREATE TABLE audit_checkpoints (
    workspace_id BLOB NOT NULL REFERENCES workspaces (id),
    last_seq     INTEGER NOT NULL,
    hash         BLOB,
    removed      INTEGER NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (workspace_id, last_seq)
) STRICT;

INSERT INTO audit_checkpoints (workspace_id, last_seq, hash, removed, created_at)
SELECT id, audit_seq, NULL, 0, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
FROM workspaces WHERE audit_seq > 0;
