-- The SQL of GET /v1/workspaces/{id}/activity: authenticate, then one page of events.
SELECT t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    ARRAY(SELECT tw.workspace_id FROM token_workspaces tw
          WHERE tw.token_id = t.id AND tw.revoked_at IS NULL ORDER BY tw.position) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at, t.secret_hash
FROM tokens t WHERE t.public_id = :public_id;
SELECT id, organisation_id, workspace_id, seq, event_type, actor_kind, actor_id, target_kind,
       target_id, correlation_id, occurred_at, data
FROM audit_events
WHERE workspace_id = :ws AND (NULL::bigint IS NULL OR seq < NULL::bigint)
ORDER BY seq DESC LIMIT 51;
