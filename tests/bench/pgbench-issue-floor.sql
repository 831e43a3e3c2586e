-- The floor of POST /v1/personal-access-tokens: what any issuance must do at the least on
-- this schema, in the server's own statements (server/src/storage/postgres/tokens.rs and
-- audit.rs). Authenticate: the credential lookup, whose token and owner the rest uses. Then
-- one transaction: the token with its workspace grant (one statement), its audit event
-- without a sequence (as the server inserts it; the server numbers events after the commit in
-- a sequencing pass, which this floor leaves out), commit. Left out as well, so that this is
-- an upper bound: resolving the targets, the issuer's and owner's locks, the grant and cap
-- counts, HTTP, JSON and hashing. No per-workspace lock: the product no longer takes one.
-- The server gathers concurrent issuances into shared transactions (postgres/batch.rs), so
-- the scripts refuse a ratio above 1.0 against this floor rather than print one.
--
-- Run it with no server up and delete its rows afterwards (lib.sh's delete_floor_rows finds
-- the events by their correlation id), or a server's sequencer would number them.
-- pgbench replaces :name even inside literals and after ::, hence CAST(), chr(58) and dots
-- where the server writes colons in the JSON (same length). bench_users maps 0..127 to the
-- users the HTTP run spreads its requests over (a subquery of microseconds, no round trip).
\set u random(0, 127)
SELECT t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    ARRAY(SELECT tw.workspace_id FROM token_workspaces tw
          WHERE tw.token_id = t.id AND tw.revoked_at IS NULL ORDER BY tw.position) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at, t.issued_by_token_id, t.secret_hash
FROM tokens t WHERE t.public_id = (SELECT public_id FROM bench_users WHERE n = CAST(:u AS integer))
\gset auth_
BEGIN;
WITH t AS (
    INSERT INTO tokens (id, public_id, user_id, organisation_id, name, secret_hash, scopes,
        environment_ids, created_at, expires_at, issued_by_token_id)
    VALUES (gen_random_uuid(), substr(md5(CAST(random() AS text)), 1, 12), CAST(:auth_user_id AS uuid),
        CAST(:auth_organisation_id AS uuid), 'pgbench-' || gen_random_uuid(),
        sha256(CAST(CAST(random() AS text) AS bytea)), ARRAY['activity' || chr(58) || 'read'],
        CAST(ARRAY[] AS uuid[]), now(), now() + interval '30 days', CAST(:auth_id AS uuid))
    RETURNING id
)
INSERT INTO token_workspaces (token_id, workspace_id, position)
SELECT t.id, w.workspace_id, w.ord - 1 FROM t, unnest(ARRAY[CAST(:ws AS uuid)]) WITH ORDINALITY AS w(workspace_id, ord);
INSERT INTO audit_events (id, organisation_id, workspace_id, event_type, actor_kind,
    actor_id, target_kind, target_id, correlation_id, occurred_at, data)
VALUES (gen_random_uuid(), CAST(:auth_organisation_id AS uuid), CAST(:ws AS uuid), 'token.issued', 'user',
    CAST(:auth_user_id AS uuid), 'token', gen_random_uuid(), '5f0e6a8e-0000-4000-8000-000000000000', now(),
    CAST('{"tokenId":"5f0e6a8e-0000-4000-8000-000000000000","name":"wrk-1764093600-1-12345","prefix":"cpat_0123456789ab","ownerId":"5f0e6a8e-0000-4000-8000-000000000000","scopes":["activity.read"],"workspaceCount":1,"environmentIds":[],"expiresAt":"2026-12-25T18.00.00.000000Z","issuedByTokenId":"5f0e6a8e-0000-4000-8000-000000000000"}' AS jsonb));
END;
