-- Record the partial summary of a run that stopped before its reconcile, as Python
-- built it from run_stopped_facts.sql: the status run_status decided ('cancelled'
-- once none of its windows still runs; a run still working keeps its status, with
-- the partial figures), when it finished (NULL while it works), its windows and the
-- rows deleted so far. Never overwrites the summary of a reconciled run.
-- Touches one row of retention.runs.
UPDATE retention.runs
SET status = %(status)s,
    finished_at = %(finished_at)s,
    windows = %(windows)s,
    rows_deleted = %(rows_deleted)s,
    summary = %(summary)s
WHERE policy = %(policy)s
  AND run_id = %(run_id)s
  AND status IN ('planned', 'cancelled')
RETURNING status
