-- A policy's partition records that an earlier attempt (of any run, this one's
-- earlier tries included) left unfinished: 'started' (the task may have died after
-- the detach committed and before the record moved on) or 'detached' for a drop
-- (the drop failed or never ran). The finishing pass looks at each table. Read-only.
SELECT run_id, partition_name, table_oid, action, state
FROM retention.partition_drops
WHERE policy = %(policy)s
  AND (state = 'started' OR (state = 'detached' AND action = 'drop'))
ORDER BY started_at, partition_name
