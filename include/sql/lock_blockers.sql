-- Other sessions in an open transaction holding a lock on any of the given tables,
-- for the message of a statement of ours that hit lock_timeout (see rows/locks.py):
-- `conflicts` marks those holding a mode in %(conflicting)s, the modes that block
-- what we asked for (a DELETE's ROW EXCLUSIVE, a DETACH's or DROP's stronger lock).
-- The others only mark sessions that may hold row locks (ROW SHARE of
-- SELECT ... FOR UPDATE, ROW EXCLUSIVE of a write), named when no row lock was
-- traced to its owner.
-- Read-only; catalog views only (pg_locks, pg_stat_activity): never waits on a table.
SELECT
    activity.pid,
    activity.application_name,
    activity.state,
    extract(epoch FROM clock_timestamp() - activity.xact_start) AS xact_seconds,
    left(activity.query, 160) AS query,
    array_agg(DISTINCT lock.mode) AS modes,
    bool_or(lock.mode = ANY (%(conflicting)s::text[])) AS conflicts
FROM pg_locks AS lock
JOIN pg_stat_activity AS activity ON activity.pid = lock.pid
WHERE lock.locktype = 'relation'
  AND lock.relation IN (
      SELECT to_regclass(format('%%I.%%I', t.schema_name, t.table_name))
      FROM unnest(%(schemas)s::text[], %(tables)s::text[]) AS t (schema_name, table_name)
  )
  AND lock.granted
  AND activity.pid <> pg_backend_pid()
  AND activity.xact_start IS NOT NULL
GROUP BY activity.pid, activity.application_name, activity.state, activity.xact_start,
         activity.query
ORDER BY activity.xact_start
