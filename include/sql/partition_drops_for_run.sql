-- The partitions a run detached or dropped, for its summary. Read-only.
SELECT partition_name, bounds, estimated_rows, action, state, started_at, finished_at
FROM retention.partition_drops
WHERE policy = %(policy)s AND run_id = %(run_id)s
ORDER BY started_at, partition_name
