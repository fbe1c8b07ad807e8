-- Rows the policy's latest reconciled run found older than its cutoff but outside
-- every planned window (0 or more). Read-only; uses runs_planned.
SELECT rows_outside_windows AS n
FROM retention.runs
WHERE policy = %(policy)s
  AND rows_outside_windows IS NOT NULL
ORDER BY planned_at DESC
LIMIT 1
