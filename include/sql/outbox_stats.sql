-- Outbox events of a policy by state, the pending ones older than the lag limit,
-- and whether its receiver is disabled. Read-only.
SELECT
    (SELECT coalesce(jsonb_object_agg(state, n), jsonb_build_object())
     FROM (SELECT state, count(*) AS n FROM retention.outbox
           WHERE policy = %(policy)s GROUP BY state) AS by_state) AS events_by_state,
    (SELECT count(*) FROM retention.outbox
     WHERE policy = %(policy)s AND state IN ('pending', 'in_flight')
       AND created_at < now() - make_interval(secs => %(lag_hours)s * 3600)) AS overdue,
    (SELECT disabled_at FROM retention.notify_endpoints WHERE policy = %(policy)s)
        AS endpoint_disabled_at
