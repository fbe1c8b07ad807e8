-- Purge one bounded batch of a policy's window ledger and run summaries planned
-- before the audit horizon (a run's windows go with or before its summary).
-- A window that a live (pending, in-flight) or dead operation still names is
-- kept, so `explain` can always say which window an operation came from.
-- Locks at most batch_rows window rows and the runs whose windows are all gone.
WITH doomed AS (
    SELECT window_key
    FROM retention.windows
    WHERE policy = %(policy)s AND planned_at < %(horizon)s
      AND NOT EXISTS (SELECT 1 FROM retention.operations AS o
                      WHERE o.window_key = retention.windows.window_key
                        AND o.state IN ('pending', 'in_flight', 'dead'))
    ORDER BY planned_at
    LIMIT %(batch_rows)s
), windows AS (
    DELETE FROM retention.windows WHERE window_key IN (SELECT window_key FROM doomed)
    RETURNING 1
), runs AS (
    DELETE FROM retention.runs AS r
    WHERE r.policy = %(policy)s AND r.planned_at < %(horizon)s
      AND r.run_id IN (SELECT r2.run_id FROM retention.runs AS r2
                       WHERE r2.policy = %(policy)s AND r2.planned_at < %(horizon)s
                       LIMIT %(batch_rows)s)
      AND NOT EXISTS (SELECT 1 FROM retention.windows AS w
                      WHERE w.policy = r.policy AND w.run_id = r.run_id
                        AND w.window_key NOT IN (SELECT window_key FROM doomed))
    RETURNING 1
)
SELECT (SELECT count(*) FROM windows) AS windows, (SELECT count(*) FROM runs) AS runs
