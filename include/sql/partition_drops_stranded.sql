-- A policy's partitions that were to be dropped and are neither dropped nor given up
-- as something else: detached tables whose drop failed or never ran, and detaches
-- still 'started'. While any is listed, reconcile makes the run dirty. Read-only.
SELECT run_id, partition_name, state, last_error, drop_attempts
FROM retention.partition_drops
WHERE policy = %(policy)s AND action = 'drop' AND state IN ('started', 'detached')
ORDER BY started_at, partition_name
