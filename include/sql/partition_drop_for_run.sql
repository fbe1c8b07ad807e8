-- The partitions a run detached, dropped or left to the row path, for its summary.
-- Read-only.
SELECT partition_name, bounds, estimated_rows, action, state, reason, last_error
FROM retention.partition_drops
WHERE policy = %(policy)s AND run_id = %(run_id)s
ORDER BY started_at, partition_name
