-- A command's deadline: its submission plus its timeoutSeconds, written at submission so the
-- timeout sweep reads open commands by deadline through an index instead of computing one per
-- row. SQLite cannot add a NOT NULL column without a default; every insert sets it.
ALTER TABLE runner_commands ADD COLUMN deadline_at TEXT;
UPDATE runner_commands
    SET deadline_at = strftime('%Y-%m-%dT%H:%M:%f', created_at, '+' || timeout_seconds || ' seconds')
        || '+00:00';
CREATE INDEX runner_commands_open_deadline ON runner_commands (deadline_at)
    WHERE status IN ('queued', 'dispatched', 'running');

-- Approval decisions (`cpctl workflows revisions approve|reject`): who decided, when and why.
ALTER TABLE workflow_revisions ADD COLUMN decided_by BLOB REFERENCES users (id);
ALTER TABLE workflow_revisions ADD COLUMN decided_at TEXT;
ALTER TABLE workflow_revisions ADD COLUMN decision_reason TEXT;

-- Administrators of their organisation: only they may decide approvals. `cpctl bootstrap`
-- (and `--dev`) make the user they create one, `cpctl users create --admin` another. Before
-- this column, the first user of an organisation was the one bootstrap created: it becomes
-- its administrator.
ALTER TABLE users ADD COLUMN admin INTEGER NOT NULL DEFAULT 0;
UPDATE users SET admin = 1
WHERE NOT EXISTS (
    SELECT 1 FROM users o
    WHERE o.organisation_id = users.organisation_id
      AND (o.created_at < users.created_at OR (o.created_at = users.created_at AND o.id < users.id))
);
