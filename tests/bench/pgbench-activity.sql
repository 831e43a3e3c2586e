-- The SQL of GET /v1/workspaces/{id}/activity on Postgres: authenticate, then one page of
-- events, statement for statement as the server sends them (a unit test in
-- server/src/storage/records/postgres/activity_floor.rs compares this file with the server's
-- own text, so the floor cannot drift from the endpoint again). Parameters as pgbench binds
-- them: :public_id for $1 of the first, :ws for $1 of the second, NULL for its cursor, 51
-- for its limit.
SELECT t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    ARRAY(SELECT tw.workspace_id FROM token_workspaces tw
          WHERE tw.token_id = t.id AND tw.revoked_at IS NULL ORDER BY tw.position) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at, t.issued_by_token_id,
    t.last_used_at, t.last_used_address, t.last_used_agent, t.secret_hash, NULL AS valid_until,
    u.disabled_at IS NOT NULL AS user_disabled, u.role AS user_role
FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.public_id = :public_id
UNION ALL
SELECT t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    ARRAY(SELECT tw.workspace_id FROM token_workspaces tw
          WHERE tw.token_id = t.id AND tw.revoked_at IS NULL ORDER BY tw.position) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at, t.issued_by_token_id,
    t.last_used_at, t.last_used_address, t.last_used_agent, p.secret_hash, p.valid_until,
    u.disabled_at IS NOT NULL AS user_disabled, u.role AS user_role
FROM token_previous_secrets p JOIN tokens t ON t.id = p.token_id JOIN users u ON u.id = t.user_id
WHERE p.public_id = :public_id;
SELECT id, organisation_id, workspace_id, seq, event_type,
    actor_kind, actor_id, target_kind, target_id, correlation_id, occurred_at,
    CAST(data AS TEXT) AS data, actor_token_id FROM audit_events
WHERE workspace_id = :ws AND seq IS NOT NULL
  AND (CAST(NULL AS BIGINT) IS NULL OR seq < NULL)
ORDER BY seq DESC LIMIT 51;
