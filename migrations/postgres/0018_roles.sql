-- A user's role replaces the `admin` flag: `member`, `admin` (of its organisation) or
-- `operator` (of the instance). Administrators stay administrators. The earliest of them, the
-- user the first `cpctl bootstrap` created, becomes the operator, so an existing deployment has
-- one who can administer it over HTTP.
ALTER TABLE users ADD COLUMN role text NOT NULL DEFAULT 'member'
    CHECK (role IN ('member', 'admin', 'operator'));
UPDATE users SET role = 'admin' WHERE admin;
UPDATE users SET role = 'operator'
WHERE id = (SELECT id FROM users WHERE admin ORDER BY created_at, id LIMIT 1);
ALTER TABLE users DROP COLUMN admin;
