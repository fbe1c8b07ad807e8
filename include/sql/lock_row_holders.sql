-- Sessions whose open transaction holds a row lock on the next keys of a window:
-- read right after one of our batches hit lock_timeout, in its own short
-- transaction (rows/locks.py says why pg_blocking_pids() cannot answer then).
-- A locked row (SELECT ... FOR UPDATE / FOR SHARE, UPDATE, DELETE) keeps the
-- locking transaction's id in its xmax, and pg_locks maps a transaction id that
-- is still running to its session. Reads at most batch_rows (capped by the
-- caller) eligible keys after `after` in the window's scope (the key index): a lock
-- on a row newer than the cutoff never blocks our delete. Takes only ACCESS SHARE.
SELECT
    activity.pid,
    activity.application_name,
    activity.state,
    extract(epoch FROM clock_timestamp() - activity.xact_start) AS xact_seconds,
    left(activity.query, 160) AS query,
    min(next_rows.k) AS first_key,
    max(next_rows.k) AS last_key,
    count(*) AS rows_locked
FROM (
    SELECT {key} AS k, xmax AS locker
    FROM {table}
    WHERE {key} > %(after)s
      AND {key} <= %(last_id)s
      AND (%(cutoff)s::timestamptz IS NULL OR {ts} < %(cutoff)s)
      AND {tenant_filter}
    ORDER BY {key}
    LIMIT %(batch_rows)s
) AS next_rows
JOIN pg_locks AS lock
  ON lock.locktype = 'transactionid'
 AND lock.transactionid = next_rows.locker
 AND lock.mode = 'ExclusiveLock'
 AND lock.granted
JOIN pg_stat_activity AS activity ON activity.pid = lock.pid
WHERE activity.pid <> pg_backend_pid()
GROUP BY activity.pid, activity.application_name, activity.state, activity.xact_start,
         activity.query
ORDER BY activity.xact_start
