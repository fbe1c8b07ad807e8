-- The windows of one plan, in window order. Read-only.
SELECT window_key, policy, run_id, plan_id, window_no, tenant_scope, tenant, cutoff,
       first_id, last_id, expected_rows, state, attempts, batches, timeouts,
       rows_deleted, rows_counted, rows_remaining, seconds, longest_batch_ms,
       pauses, paused_seconds, pause_reasons, rows_deleted_by_table, drain_time
FROM retention.windows
WHERE policy = %(policy)s AND plan_id = %(plan_id)s
ORDER BY window_no
