-- Outbox events of a policy by state, and whether its receiver is disabled. Read-only.
SELECT
    (SELECT coalesce(jsonb_object_agg(state, n), jsonb_build_object())
     FROM (SELECT state, count(*) AS n FROM retention.outbox
           WHERE policy = %(policy)s GROUP BY state) AS by_state) AS events_by_state,
    (SELECT disabled_at FROM retention.notify_endpoints WHERE policy = %(policy)s)
        AS endpoint_disabled_at
