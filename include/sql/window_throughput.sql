-- Rows per second that this policy's recent finished windows deleted while they
-- worked (time spent paused for health or the pause switch left out), for sizing
-- the next plan's windows by time. Read-only; uses windows_policy_plan.
SELECT sum(rows_deleted) AS rows, sum(seconds - paused_seconds) AS seconds, count(*) AS windows
FROM (
    SELECT rows_deleted, seconds, paused_seconds
    FROM retention.windows
    WHERE policy = %(policy)s
      AND state = 'done'
      AND rows_deleted >= %(min_rows)s
      AND seconds - paused_seconds > 0
    ORDER BY finished_at DESC
    LIMIT 20
) AS recent
