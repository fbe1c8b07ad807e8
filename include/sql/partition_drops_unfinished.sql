-- Partitions of a policy that an earlier attempt detached for dropping but did not
-- drop (the drop timed out or the task died in between). Read-only.
SELECT run_id, partition_name, bounds, estimated_rows, action
FROM retention.partition_drops
WHERE policy = %(policy)s AND action = 'drop' AND state = 'detached'
ORDER BY started_at
