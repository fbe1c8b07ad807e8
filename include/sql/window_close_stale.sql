-- Close windows left 'running' by a task that ended without closing them (killed
-- by SIGKILL, a lost worker): of one run, or of every other run of the policy.
-- Their remaining rows stay for a rerun. Touches only those rows of retention.windows.
UPDATE retention.windows
SET state = 'cancelled',
    last_error = %(reason)s,
    finished_at = now()
WHERE policy = %(policy)s
  AND state = 'running'
  AND ((%(only_run)s::text IS NOT NULL AND run_id = %(only_run)s)
       OR (%(except_run)s::text IS NOT NULL AND run_id <> %(except_run)s))
RETURNING window_key, run_id
