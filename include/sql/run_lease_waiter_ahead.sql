-- The runs waiting for the policy's run lease that go before a run with this cutoff
-- (NULL: a caller that does not know its place, such as a cleared task of an old run,
-- goes after every waiter), earliest first: an earlier cutoff, or the same cutoff and
-- an earlier logical date, or both the same and a smaller run id. Only waiters that
-- looked within the last stale_seconds count; the caller asks Airflow whether their
-- DAG runs still run. Read-only; the policy's rows of retention.run_lease_waiters.
SELECT run_id, cutoff, logical_date, last_seen
FROM retention.run_lease_waiters
WHERE policy = %(policy)s
  AND run_id <> %(run_id)s
  AND last_seen >= now() - make_interval(secs => %(stale_seconds)s)
  AND (
      %(cutoff)s::timestamptz IS NULL
      OR (cutoff, coalesce(logical_date, cutoff), run_id)
         < (%(cutoff)s::timestamptz,
            coalesce(%(logical_date)s::timestamptz, %(cutoff)s::timestamptz),
            %(run_id)s::text)
  )
ORDER BY cutoff, coalesce(logical_date, cutoff), run_id
