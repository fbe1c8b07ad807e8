-- The records of earlier attempts that a run's finishing pass closed (dropped,
-- marked detached, not_detached or abandoned), for its summary. Read-only.
SELECT run_id, partition_name, action, state, reason
FROM retention.partition_drops
WHERE policy = %(policy)s AND resolved_by_run = %(run_id)s
ORDER BY finished_at, partition_name
