-- Dead letters of a policy: those that went dead since a moment (the run's
-- planning), by failure class, and how many are dead in all. A dead operation
-- reviewed and discarded (retention.discards, for the dead episode it is in) is
-- not new: a person has explained it. Read-only.
SELECT
    (SELECT count(*) FROM retention.dead_operations AS o
     WHERE policy = %(policy)s AND dead_since >= %(since)s
       AND NOT EXISTS (SELECT 1 FROM retention.discards AS d
                       WHERE d.operation_key = o.operation_key AND d.dead_since = o.dead_since)) AS new_operations,
    (SELECT coalesce(jsonb_object_agg(coalesce(failure_class, 'unknown'), n), jsonb_build_object())
     FROM (SELECT failure_class, count(*) AS n FROM retention.dead_operations AS o
           WHERE policy = %(policy)s AND dead_since >= %(since)s
             AND NOT EXISTS (SELECT 1 FROM retention.discards AS d
                             WHERE d.operation_key = o.operation_key
                               AND d.dead_since = o.dead_since)
           GROUP BY failure_class) AS by_class) AS new_operations_by_class,
    (SELECT count(*) FROM retention.dead_operations WHERE policy = %(policy)s)
        AS dead_operations,
    (SELECT count(*) FROM retention.dead_events
     WHERE policy = %(policy)s AND dead_since >= %(since)s) AS new_events,
    (SELECT count(*) FROM retention.dead_events WHERE policy = %(policy)s) AS dead_events
