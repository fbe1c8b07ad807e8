-- The run of the policy that had already deleted everything this run's cutoff allows
-- before this run was planned: a clean run (not a dry run) with a cutoff at least as
-- late, finished before this run's planning; the first of them to finish, which is the
-- one that deleted those rows. A backfill's older dates run after a later date have
-- nothing left to delete, and their summaries say which run deleted it.
-- Read-only; at most one row of retention.runs.
SELECT run_id, logical_date, cutoff, finished_at
FROM retention.runs
WHERE policy = %(policy)s
  AND run_id <> %(run_id)s
  AND status = 'clean'
  AND NOT dry_run
  AND cutoff >= %(cutoff)s
  AND finished_at <= %(planned_at)s
ORDER BY finished_at
LIMIT 1
