-- Budgets measured at install: each version's decision times and peak memory on its cases,
-- and the memory budget it runs under (the server's CP_POLICY_MEMORY_MIB unless set at
-- install). An activation that overrode a failed measurement says so.

CREATE TABLE policy_budgets (
    policy_id         BLOB PRIMARY KEY REFERENCES policies (id) ON DELETE CASCADE,
    memory_budget_mib INTEGER NOT NULL,
    decisions         INTEGER NOT NULL,
    failures          INTEGER NOT NULL,
    p50_us            INTEGER NOT NULL,
    p99_us            INTEGER NOT NULL,
    max_us            INTEGER NOT NULL,
    peak_memory_bytes INTEGER NOT NULL,
    deadline_ms       INTEGER NOT NULL,
    measured_at       TEXT NOT NULL
) STRICT;

ALTER TABLE policy_activations ADD COLUMN forced INTEGER NOT NULL DEFAULT 0;
