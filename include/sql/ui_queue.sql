-- The Retention view: a policy's remote backlog (operations by state; dead_discarded:
-- the dead ones reviewed and discarded, retention.discards), the age of its oldest
-- pending operation, its events by state, and its limiter scope's
-- rate now (the AIMD arithmetic of retention.take_tokens, read without taking a
-- token). Read-only; takes no row locks.
SELECT
    (SELECT coalesce(jsonb_object_agg(state, n), jsonb_build_object())
     FROM (SELECT state, count(*) AS n FROM retention.operations
           WHERE policy = %(policy)s AND state IN ('pending', 'in_flight', 'dead')
           GROUP BY state
           UNION ALL
           SELECT 'dead_discarded', count(*) FROM retention.dead_operations AS o
           WHERE o.policy = %(policy)s
             AND EXISTS (SELECT 1 FROM retention.discards AS d
                         WHERE d.operation_key = o.operation_key
                           AND d.dead_since = o.dead_since)
           HAVING count(*) > 0) AS by_state) AS operations_by_state,
    (SELECT extract(epoch FROM now() - min(created_at)) FROM retention.operations
     WHERE policy = %(policy)s AND state = 'pending') AS oldest_pending_seconds,
    (SELECT coalesce(jsonb_object_agg(state, n), jsonb_build_object())
     FROM (SELECT state, count(*) AS n FROM retention.outbox
           WHERE policy = %(policy)s AND state IN ('pending', 'in_flight', 'dead')
           GROUP BY state) AS by_state) AS events_by_state,
    (SELECT CASE WHEN closed_until > clock_timestamp() THEN 0
                 ELSE least(rate_ceiling, effective_rate
                            + greatest(0, extract(epoch FROM clock_timestamp() - updated_at))
                              * rate_ceiling / recovery_seconds) END
     FROM retention.rate_limiters WHERE scope = %(scope)s) AS effective_rate,
    (SELECT rate_ceiling FROM retention.rate_limiters WHERE scope = %(scope)s) AS rate_ceiling,
    (SELECT closed_until FROM retention.rate_limiters
     WHERE scope = %(scope)s AND closed_until > clock_timestamp()) AS closed_until
