-- Budgets measured at install: each version's decision times and peak memory on its cases,
-- and the memory budget it runs under (the server's CP_POLICY_MEMORY_MIB unless set at
-- install). An activation that overrode a failed measurement says so.

CREATE TABLE policy_budgets (
    policy_id         uuid PRIMARY KEY REFERENCES policies (id) ON DELETE CASCADE,
    memory_budget_mib integer NOT NULL,
    decisions         integer NOT NULL,
    failures          integer NOT NULL,
    p50_us            bigint NOT NULL,
    p99_us            bigint NOT NULL,
    max_us            bigint NOT NULL,
    peak_memory_bytes bigint NOT NULL,
    deadline_ms       bigint NOT NULL,
    measured_at       timestamptz NOT NULL
);

ALTER TABLE policy_activations ADD COLUMN forced boolean NOT NULL DEFAULT false;
