-- Audit proofs: signed heads, and checkpoints chained and signed.
--
-- A signed head says "at `signed_at_ms` the chain of this workspace had reached `seq` with
-- `hash`", signed with the server's current webhook signing key (Ed25519, `kid` as published
-- at /.well-known/jwks.json) over the message `domain/audit_proof.rs` documents. One row per
-- (workspace, sequence): replicas that race to sign the same head keep the first.
CREATE TABLE audit_signed_heads (
    workspace_id uuid NOT NULL REFERENCES workspaces (id),
    seq          bigint NOT NULL,
    hash         bytea NOT NULL,
    signed_at_ms bigint NOT NULL,
    kid          text NOT NULL,
    signature    bytea NOT NULL,
    PRIMARY KEY (workspace_id, seq)
);

-- A retention checkpoint names the checkpoint before it (its sequence and hash; 0 and NULL
-- for the first) and is signed like a head. Checkpoints 0014 wrote stay unsigned: verify
-- accepts an unsigned one only as the first, hashless, removing nothing (docs/decisions.md).
ALTER TABLE audit_checkpoints ADD COLUMN prev_seq bigint;
ALTER TABLE audit_checkpoints ADD COLUMN prev_hash bytea;
ALTER TABLE audit_checkpoints ADD COLUMN signed_at_ms bigint;
ALTER TABLE audit_checkpoints ADD COLUMN kid text;
ALTER TABLE audit_checkpoints ADD COLUMN signature bytea;
