-- The floor of issue #17: the two inserts a token issuance commits (the token and its audit
-- event), in one transaction, with no per-workspace serialisation: the event is written
-- without a sequence, as the server now writes it before its sequencing pass. Everything
-- else the endpoint does (authentication, grant checks, the owner's lock) is left out, so
-- this is an upper bound the server cannot reach.
-- pgbench replaces :name even inside literals and after ::, hence CAST().
\set u random(0, 127)
BEGIN;
INSERT INTO tokens (id, public_id, user_id, organisation_id, name, secret_hash, scopes,
    environment_ids, created_at, expires_at)
VALUES (gen_random_uuid(), substr(md5(CAST(random() AS text)), 1, 12),
    (SELECT user_id FROM bench_users WHERE n = CAST(:u AS integer)), CAST(:org AS uuid),
    'pgbench-' || gen_random_uuid(), sha256(CAST(CAST(random() AS text) AS bytea)),
    ARRAY['activity' || chr(58) || 'read'], CAST(ARRAY[] AS uuid[]), now(), now() + interval '30 days');
INSERT INTO audit_events (id, organisation_id, workspace_id, event_type, actor_kind,
    actor_id, target_kind, target_id, correlation_id, occurred_at, data)
VALUES (gen_random_uuid(), CAST(:org AS uuid), CAST(:ws AS uuid), 'token.issued', 'user',
    (SELECT user_id FROM bench_users WHERE n = CAST(:u AS integer)), 'token', gen_random_uuid(),
    '5f0e6a8e-0000-4000-8000-000000000000', now(),
    CAST('{"tokenId":"5f0e6a8e-0000-4000-8000-000000000000","name":"pgbench-token-name","scopes":["activity.read"]}' AS jsonb));
END;
