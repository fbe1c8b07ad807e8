-- Record one planned window; a window key already recorded is left untouched,
-- which keeps a run's plan immutable across retries.
INSERT INTO retention.windows (
    window_key, policy, run_id, plan_id, window_no, tenant_scope, tenant, cutoff,
    first_id, last_id, expected_rows
) VALUES (
    %(window_key)s, %(policy)s, %(run_id)s, %(plan_id)s, %(window_no)s, %(tenant_scope)s, %(tenant)s,
    %(cutoff)s, %(first_id)s, %(last_id)s, %(expected_rows)s
)
ON CONFLICT (window_key) DO NOTHING
