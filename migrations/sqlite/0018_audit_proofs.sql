-- Audit proofs: signed heads, and checkpoints chained and signed; see the Postgres migration
-- `0017_audit_proofs`.
CREATE TABLE audit_signed_heads (
    workspace_id BLOB NOT NULL REFERENCES workspaces (id),
    seq          INTEGER NOT NULL,
    hash         BLOB NOT NULL,
    signed_at_ms INTEGER NOT NULL,
    kid          TEXT NOT NULL,
    signature    BLOB NOT NULL,
    PRIMARY KEY (workspace_id, seq)
) STRICT;

ALTER TABLE audit_checkpoints ADD COLUMN prev_seq INTEGER;
ALTER TABLE audit_checkpoints ADD COLUMN prev_hash BLOB;
ALTER TABLE audit_checkpoints ADD COLUMN signed_at_ms INTEGER;
ALTER TABLE audit_checkpoints ADD COLUMN kid TEXT;
ALTER TABLE audit_checkpoints ADD COLUMN signature BLOB;
