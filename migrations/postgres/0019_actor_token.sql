-- The token a user acted with, beside the user: an event names both (docs/design.md,
-- "Principals and roles"). Null for runners, the admin CLI, the system, and events written
-- before this column; the chain hash leaves an absent token out, so those events still verify.
ALTER TABLE audit_events ADD COLUMN actor_token_id uuid;
