-- Dead letters of a policy: those that went dead since a moment (the run's
-- planning), by failure class, and how many are dead in all. Read-only.
SELECT
    (SELECT count(*) FROM retention.dead_operations
     WHERE policy = %(policy)s AND dead_since >= %(since)s) AS new_operations,
    (SELECT coalesce(jsonb_object_agg(coalesce(failure_class, 'unknown'), n), jsonb_build_object())
     FROM (SELECT failure_class, count(*) AS n FROM retention.dead_operations
           WHERE policy = %(policy)s AND dead_since >= %(since)s
           GROUP BY failure_class) AS by_class) AS new_operations_by_class,
    (SELECT count(*) FROM retention.dead_operations WHERE policy = %(policy)s)
        AS dead_operations,
    (SELECT count(*) FROM retention.dead_events
     WHERE policy = %(policy)s AND dead_since >= %(since)s) AS new_events,
    (SELECT count(*) FROM retention.dead_events WHERE policy = %(policy)s) AS dead_events
