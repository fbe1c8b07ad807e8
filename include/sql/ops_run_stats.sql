-- Remote-deletion figures of a policy since a run started: attempts by outcome
-- class, lease expiries, dead operations, and the limiter's effective rate. Read-only.
SELECT
    (SELECT coalesce(jsonb_object_agg(outcome_class, n), jsonb_build_object())
     FROM (SELECT outcome_class, count(*) AS n
           FROM retention.attempts
           WHERE policy = %(policy)s AND finished_at >= %(since)s
           GROUP BY outcome_class) AS by_outcome) AS attempts_by_outcome,
    (SELECT coalesce(sum(lease_expiries), 0)
     FROM retention.operations
     WHERE policy = %(policy)s AND updated_at >= %(since)s) AS lease_expiries,
    (SELECT count(*) FROM retention.operations
     WHERE policy = %(policy)s AND state = 'dead') AS dead_total,
    (SELECT coalesce(jsonb_object_agg(state, n), jsonb_build_object())
     FROM (SELECT state, count(*) AS n FROM retention.operations
           WHERE policy = %(policy)s AND state IN ('pending', 'in_flight', 'dead')
           GROUP BY state) AS by_state) AS ledger_backlog,
    (SELECT effective_rate FROM retention.rate_limiters WHERE scope = %(scope)s)
        AS effective_rate
