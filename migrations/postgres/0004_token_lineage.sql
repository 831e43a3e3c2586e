-- Token lineage: the token that issued a token (NULL when cpctl issued it). A child's expiry is
-- capped at its issuer's, and revocation can cascade to descendants.
ALTER TABLE tokens ADD COLUMN issued_by_token_id uuid REFERENCES tokens (id);
CREATE INDEX tokens_issued_by ON tokens (issued_by_token_id) WHERE issued_by_token_id IS NOT NULL;
