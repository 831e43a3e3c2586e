-- A user's role replaces the `admin` flag; see the Postgres migration `0018_roles`.
ALTER TABLE users ADD COLUMN role TEXT NOT NULL DEFAULT 'member'
    CHECK (role IN ('member', 'admin', 'operator'));
UPDATE users SET role = 'admin' WHERE admin = 1;
UPDATE users SET role = 'operator'
WHERE id = (SELECT id FROM users WHERE admin = 1 ORDER BY created_at, id LIMIT 1);
ALTER TABLE users DROP COLUMN admin;
