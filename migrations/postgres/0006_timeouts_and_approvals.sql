-- A command's deadline: its submission plus its timeoutSeconds, written at submission so the
-- timeout sweep reads open commands by deadline through an index instead of computing one per
-- row.
ALTER TABLE runner_commands ADD COLUMN deadline_at timestamptz;
UPDATE runner_commands SET deadline_at = created_at + make_interval(secs => timeout_seconds);
ALTER TABLE runner_commands ALTER COLUMN deadline_at SET NOT NULL;
CREATE INDEX runner_commands_open_deadline ON runner_commands (deadline_at)
    WHERE status IN ('queued', 'dispatched', 'running');

-- Approval decisions (`cpctl workflows revisions approve|reject`): who decided, when and why.
ALTER TABLE workflow_revisions ADD COLUMN decided_by uuid REFERENCES users (id);
ALTER TABLE workflow_revisions ADD COLUMN decided_at timestamptz;
ALTER TABLE workflow_revisions ADD COLUMN decision_reason text;

-- Administrators of their organisation: only they may decide approvals. `cpctl bootstrap`
-- (and `--dev`) make the user they create one, `cpctl users create --admin` another. Before
-- this column, the first user of an organisation was the one bootstrap created: it becomes
-- its administrator.
ALTER TABLE users ADD COLUMN admin boolean NOT NULL DEFAULT false;
UPDATE users u SET admin = true
WHERE NOT EXISTS (
    SELECT 1 FROM users o
    WHERE o.organisation_id = u.organisation_id
      AND (o.created_at < u.created_at OR (o.created_at = u.created_at AND o.id < u.id))
);
