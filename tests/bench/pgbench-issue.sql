-- The SQL of POST /v1/personal-access-tokens: authenticate, resolve the targets, then the
-- issuance transaction (issuer's grants re-checked under lock, owner lock, name and cap check,
-- token + grant, audit event).
-- pgbench replaces :name even inside literals and after ::, hence CAST() and no colons in
-- the JSON literal (dots where the server writes colons; same length).
-- bench_users maps 0..127 to the users the HTTP run spreads its requests over; the subqueries
-- cost microseconds and add no round trip.
\set u random(0, 127)
SELECT t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    ARRAY(SELECT tw.workspace_id FROM token_workspaces tw
          WHERE tw.token_id = t.id AND tw.revoked_at IS NULL ORDER BY tw.position) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at, t.secret_hash
FROM tokens t WHERE t.public_id = (SELECT public_id FROM bench_users WHERE n = CAST(:u AS integer));
SELECT EXISTS (SELECT 1 FROM organisations WHERE id = CAST(:org AS uuid)),
       ARRAY(SELECT id FROM workspaces WHERE id = ANY(ARRAY[CAST(:ws AS uuid)]) ORDER BY id),
       ARRAY(SELECT organisation_id FROM workspaces WHERE id = ANY(ARRAY[CAST(:ws AS uuid)]) ORDER BY id),
       ARRAY(SELECT id FROM environments WHERE id = ANY(CAST(ARRAY[] AS uuid[])) ORDER BY id),
       ARRAY(SELECT workspace_id FROM environments WHERE id = ANY(CAST(ARRAY[] AS uuid[])) ORDER BY id);
BEGIN;
SELECT count(*) FROM token_workspaces tw
WHERE tw.token_id = (SELECT id FROM tokens WHERE id = (SELECT id FROM tokens WHERE public_id =
        (SELECT public_id FROM bench_users WHERE n = CAST(:u AS integer))) AND revoked_at IS NULL FOR SHARE)
  AND tw.revoked_at IS NULL AND tw.workspace_id = ANY(ARRAY[CAST(:ws AS uuid)]);
SELECT 1 FROM users WHERE id = (SELECT user_id FROM bench_users WHERE n = CAST(:u AS integer)) FOR UPDATE;
SELECT count(*) FILTER (WHERE name = 'pgbench'), count(*) FROM tokens
WHERE user_id = (SELECT user_id FROM bench_users WHERE n = CAST(:u AS integer)) AND revoked_at IS NULL AND expires_at > now();
WITH t AS (
    INSERT INTO tokens (id, public_id, user_id, organisation_id, name, secret_hash, scopes,
        environment_ids, created_at, expires_at)
    VALUES (gen_random_uuid(), substr(md5(CAST(random() AS text)), 1, 12),
        (SELECT user_id FROM bench_users WHERE n = CAST(:u AS integer)), CAST(:org AS uuid), 'pgbench-' || gen_random_uuid(),
        sha256(CAST(CAST(random() AS text) AS bytea)), ARRAY['activity' || chr(58) || 'read'], CAST(ARRAY[] AS uuid[]), now(),
        now() + interval '30 days')
    RETURNING id
)
INSERT INTO token_workspaces (token_id, workspace_id, position)
SELECT t.id, w.workspace_id, w.ord - 1 FROM t, unnest(ARRAY[CAST(:ws AS uuid)]) WITH ORDINALITY AS w(workspace_id, ord);
WITH seq AS (
    UPDATE workspaces SET audit_seq = audit_seq + 1 WHERE id = CAST(:ws AS uuid) RETURNING audit_seq
)
INSERT INTO audit_events (id, organisation_id, workspace_id, seq, event_type, actor_kind,
    actor_id, target_kind, target_id, correlation_id, occurred_at, data)
VALUES (gen_random_uuid(), CAST(:org AS uuid), CAST(:ws AS uuid), (SELECT audit_seq FROM seq), 'token.issued', 'user',
    (SELECT user_id FROM bench_users WHERE n = CAST(:u AS integer)), 'token', gen_random_uuid(),
    '5f0e6a8e-0000-4000-8000-000000000000', now(),
    CAST('{"tokenId":"5f0e6a8e-0000-4000-8000-000000000000","name":"pgbench-token-name","prefix":"cpat_0123456789ab","ownerId":"5f0e6a8e-0000-4000-8000-000000000000","scopes":["activity.read"],"workspaceIds":["5f0e6a8e-0000-4000-8000-000000000000"],"environmentIds":[],"expiresAt":"2026-12-22T15.02.59.268629Z"}' AS jsonb));
END;
