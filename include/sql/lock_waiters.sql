-- Sessions (not ours) waiting now on a lock that a retention session holds, with
-- the retention PIDs holding them up (pg_blocking_pids) and what each waiter runs:
-- the gate names them when it pauses for health.max_blocked_sessions.
-- Read-only; catalog views only. pg_blocking_pids() takes the lock manager's
-- locks briefly, so it runs once per waiting session (never per pair of sessions),
-- and only when the health check already saw a waiter.
SELECT
    waiting.pid,
    waiting.application_name,
    extract(epoch FROM clock_timestamp() - waiting.state_change) AS waiting_seconds,
    left(waiting.query, 160) AS query,
    array_agg(holder.pid ORDER BY holder.pid) AS blocked_by
FROM pg_stat_activity AS waiting
CROSS JOIN LATERAL unnest(pg_blocking_pids(waiting.pid)) AS blocking (pid)
JOIN pg_stat_activity AS holder
  ON holder.pid = blocking.pid
 AND holder.application_name LIKE 'retention%%'
WHERE waiting.wait_event_type = 'Lock'
  AND waiting.application_name NOT LIKE 'retention%%'
GROUP BY waiting.pid, waiting.application_name, waiting.state_change, waiting.query
ORDER BY waiting.state_change
LIMIT %(limit)s
