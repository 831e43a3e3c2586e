-- A command's deadline: its submission plus its timeoutSeconds, written at submission so the
-- timeout sweep reads open commands by deadline through an index instead of computing one per
-- row. SQLite cannot add a NOT NULL column without a default; every insert sets it.
ALTER TABLE runner_commands ADD COLUMN deadline_at TEXT;
UPDATE runner_commands
    SET deadline_at = strftime('%Y-%m-%dT%H:%M:%f', created_at, '+' || timeout_seconds || ' seconds')
        || '+00:00';
CREATE INDEX runner_commands_open_deadline ON runner_commands (deadline_at)
    WHERE status IN ('queued', 'dispatched', 'running');
