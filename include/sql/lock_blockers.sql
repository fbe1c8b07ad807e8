-- Other sessions holding a lock on the target table itself, for the warning of a
-- batch that hit lock_timeout (see rows/locks.py). `conflicts` marks the modes
-- that block a DELETE outright (LOCK TABLE, ALTER TABLE, CREATE INDEX without
-- CONCURRENTLY, VACUUM FULL, a TRUNCATE); the weaker ones (ROW SHARE of
-- SELECT ... FOR UPDATE, ROW EXCLUSIVE of a write) only mark sessions that may
-- hold row locks, named when no row lock was traced to its owner.
-- For a session that waits right now, pg_blocking_pids() names who holds it up.
-- Read-only; catalog views only (pg_locks, pg_stat_activity): never waits on the table.
SELECT
    activity.pid,
    activity.application_name,
    activity.state,
    extract(epoch FROM clock_timestamp() - activity.xact_start) AS xact_seconds,
    left(activity.query, 160) AS query,
    string_agg(DISTINCT lock.mode, ', ') AS modes,
    bool_or(lock.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock',
                          'AccessExclusiveLock')) AS conflicts,
    pg_blocking_pids(activity.pid) AS waits_for
FROM pg_locks AS lock
JOIN pg_stat_activity AS activity ON activity.pid = lock.pid
WHERE lock.locktype = 'relation'
  AND lock.relation = to_regclass(format('%%I.%%I', %(schema)s::text, %(table)s::text))
  AND lock.granted
  AND lock.mode <> 'AccessShareLock'
  AND activity.pid <> pg_backend_pid()
  AND activity.xact_start IS NOT NULL
GROUP BY activity.pid, activity.application_name, activity.state, activity.xact_start,
         activity.query
ORDER BY activity.xact_start
