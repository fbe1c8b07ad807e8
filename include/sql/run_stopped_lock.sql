-- Lock the row of a run that stopped before its reconcile (a SIGTERM, or a DAG run
-- that ended without it), before run_stopped_facts.sql reads what it did: a second
-- stop of the same run waits here until the first one recorded its partial summary
-- and committed, and its facts query, a later statement, then reads the windows and
-- drain passes as they are after that. Only a run not yet reconciled ('planned', or
-- 'cancelled' by an earlier stop) is returned (and locked); a reconciled run, or none,
-- returns no row. Locks one row of retention.runs until the caller's transaction ends.
SELECT r.status
FROM retention.runs AS r
WHERE r.policy = %(policy)s
  AND r.run_id = %(run_id)s
  AND r.status IN ('planned', 'cancelled')
FOR UPDATE
