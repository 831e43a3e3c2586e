-- A command's deadline: its submission plus its timeoutSeconds, written at submission so the
-- timeout sweep reads open commands by deadline through an index instead of computing one per
-- row.
ALTER TABLE runner_commands ADD COLUMN deadline_at timestamptz;
UPDATE runner_commands SET deadline_at = created_at + make_interval(secs => timeout_seconds);
ALTER TABLE runner_commands ALTER COLUMN deadline_at SET NOT NULL;
CREATE INDEX runner_commands_open_deadline ON runner_commands (deadline_at)
    WHERE status IN ('queued', 'dispatched', 'running');
